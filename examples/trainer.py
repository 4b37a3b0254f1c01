"""A trainer loop that consumes a batch's results as the episodes finish.

    .venv/bin/episodes dev &                       # Temporal + UI + a worker on 127.0.0.1:7233
    .venv/bin/python examples/trainer.py           # examples/guess-number.yaml by default
    .venv/bin/python examples/trainer.py --spec examples/python-repl.yaml --concurrency 4

It uses the blocking client (`episodes.SyncEpisodesClient`), the way a
synchronous training loop would: each result arrives as soon as its episode ends,
not in submission order, and the running mean reward is printed as it goes.

Every run is a fresh batch. Pass `--batch-id ID` to make it restartable: a second run
with the same id re-attaches to the episodes of the first (finished ones are not
run again, running ones are awaited), because workflow ids are `<batch>.<task>.s<sample>`.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

import episodes

HERE = Path(__file__).resolve().parent


def train_on(result: episodes.EpisodeResult) -> None:
    """Where a real trainer turns one rollout into a gradient step (here: nothing)."""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--address", help="Temporal frontend host:port (default: as the CLI)")
    p.add_argument("--namespace")
    p.add_argument("--task-queue", help="the workers' shared task queue (default: as the CLI)")
    p.add_argument("--spec", type=Path, default=HERE / "guess-number.yaml")
    p.add_argument(
        "--batch-id", "--batch", dest="batch", help="batch id (default: a fresh one per run)"
    )
    p.add_argument("--concurrency", type=int, help="episodes in flight (default: the spec's)")
    args = p.parse_args(argv)

    try:
        spec = episodes.load_spec(args.spec)
        batch = args.batch or f"trainer-{spec.name}-{time.strftime('%Y%m%d-%H%M%S')}"
        total = len(spec.load_tasks()) * spec.samples
        print(f"batch {batch}: {total} episodes of {spec.name}", flush=True)
        rewards: list[float] = []
        done = 0
        with (
            episodes.SyncEpisodesClient.connect(
                args.address, namespace=args.namespace, task_queue=args.task_queue
            ) as client,
            # closing(): leaving early (Ctrl-C) cancels the episodes still in flight.
            contextlib.closing(
                client.run_batch(spec, concurrency=args.concurrency, batch_id=batch)
            ) as results,
        ):
            for result in results:
                done += 1
                train_on(result)
                if result.reward is not None:
                    rewards.append(result.reward)
                reward = "-" if result.reward is None else f"{result.reward:.2f}"
                mean = f"{sum(rewards) / len(rewards):.3f}" if rewards else "-"
                print(
                    f"[{done}/{total}] {result.task_id}#{result.sample} "
                    f"{result.termination} turns={result.turns} reward={reward} mean={mean}",
                    flush=True,
                )
    except episodes.EpisodesError as e:  # unreachable server, bad spec, a failed workflow
        print(f"trainer: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("trainer: interrupted; the episodes still running were cancelled", file=sys.stderr)
        return 130
    mean = f"{sum(rewards) / len(rewards):.3f}" if rewards else "-"
    print(f"done: {done} episodes, mean reward {mean}", flush=True)
    return 0


if __name__ == "__main__":
    from episodes.client.exit import run_main  # exits without the SDK's finalization crash

    run_main(main)
