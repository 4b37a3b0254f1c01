"""`make learn`: an end-to-end RL run on a CPU, reward rising over policy versions.

    python -m learn [--versions 12] [--out learn/] [--on-stale keep|requeue]
                    [--kill-trainer-at V]

Starts the project's Temporal dev server (on free ports, state in a temporary
directory) and an in-process worker, the policy's OpenAI-compatible server
(`learn.server`), and runs the GRPO trainer (`learn.train`) on guess-number episodes:
each episode's harness asks the policy for a guess through the session's model proxy,
every call is recorded with its token ids and logprobs, and the trainer learns from
the recorded samples. Writes `summary.json` and `reward.png` into `--out`.

`--kill-trainer-at V` runs the trainer as a process of its own (`learn.process`),
SIGKILLs it once version V is checkpointed (before that step's groups are
acknowledged) and starts it again: it resumes from its checkpoint and the batch's
receipts on the server, and no group is trained twice (`trained_twice` in the
summary, beside `groups_trained`, `groups_acknowledged` and `trainer_restarts`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from episodes.client import EpisodesClient
from episodes.client.group.receipts import read_receipts
from learn.plot import plot
from learn.policy import Vocab
from learn.server import PolicyServer
from learn.train import Config, Trainer, train

HERE = Path(__file__).resolve().parent
QUEUE = "episodes-learn"


@contextlib.asynccontextmanager
async def stack() -> AsyncIterator[EpisodesClient]:
    """A dev server on free ports and a worker on this process, torn down after."""
    from episodes.client.connect import connect
    from episodes.client.devserver import DevServer
    from workers.worker import EpisodeWorker, WorkerOptions

    with tempfile.TemporaryDirectory(prefix="episodes-learn-") as tmp:
        server = DevServer(
            auto_port=True,
            headless=True,
            db_file=Path(tmp) / "temporal.db",
            log_file=Path(tmp) / "server.log",
        )
        await asyncio.to_thread(server.start)
        try:
            client = await connect(server.address, timeout_s=30)
            worker = EpisodeWorker(client, WorkerOptions(task_queue=QUEUE, max_sessions=64))
            running = asyncio.create_task(worker.run())
            try:
                yield EpisodesClient(client, task_queue=QUEUE)
                await quiesce(worker)
            finally:
                worker.request_stop(drain=False)
                with contextlib.suppress(asyncio.CancelledError):
                    await running
        finally:
            await asyncio.to_thread(server.stop)


async def quiesce(worker: Any, timeout_s: float = 60.0) -> None:
    """Let the episodes the trainer cancelled on leaving release their boxes first."""
    deadline = time.monotonic() + timeout_s
    while len(worker.registry) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)


def references(cfg: Config) -> dict[str, float]:
    """Expected rewards of random play (uniform guesses) and of exact bisection."""
    n, budget = cfg.n, cfg.budget
    p = 1.0 / n
    random_play = sum(p * (1 - p) ** (t - 1) * (1 - (t - 1) / budget) for t in range(1, budget + 1))
    total = 0.0
    for secret in range(1, n + 1):
        lo, hi = 1, n
        for t in range(1, budget + 1):
            mid = (lo + hi) // 2
            if mid == secret:
                total += 1 - (t - 1) / budget
                break
            lo, hi = (mid + 1, hi) if mid < secret else (lo, mid - 1)
    return {"random_play": random_play, "bisection": total / n}


def _progress(trainer: Trainer) -> None:
    done = trainer.version - 1
    rewards = trainer.rewards.get(done, [])
    mean = sum(rewards) / len(rewards) if rewards else float("nan")
    print(
        f"  now serving version {trainer.version:>2} (version {done}: mean reward {mean:.3f} "
        f"over {len(rewards)} episodes so far; max |logprob diff| "
        f"{trainer.max_logprob_diff:.1e}; {trainer.mixed_calls} calls served by newer weights)",
        flush=True,
    )


async def _trainer_processes(
    client: EpisodesClient, server: PolicyServer, cfg: Config, batch: str, kill_at: int, tmp: Path
) -> tuple[dict[str, Any], int]:
    """The trainer in a process of its own, SIGKILLed at version `kill_at` once and run
    again until it finishes; its summary and how many times it was restarted."""
    from learn.process import summary_path

    checkpoint = tmp / "trainer.json"
    address = client.client.service_client.config.target_host
    restarts = 0
    die_at: int | None = kill_at
    while True:
        extra = ["--die-at", str(die_at)] if die_at is not None else []
        args = [address, QUEUE, server.base_url, batch, str(checkpoint), json.dumps(cfg.__dict__)]
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "learn.process", *args, *extra
        )
        code = await proc.wait()
        if code == -9 and die_at is not None:
            print(f"  trainer SIGKILLed at version {die_at}; starting it again", flush=True)
            restarts, die_at = restarts + 1, None
            continue
        if code != 0:
            raise RuntimeError(f"the trainer process exited {code}")
        return json.loads(summary_path(checkpoint).read_text()), restarts


async def run(cfg: Config, out: Path, kill_trainer_at: int | None = None) -> dict[str, Any]:
    started = time.monotonic()
    async with (
        stack() as client,
        PolicyServer(Vocab(n=cfg.n), seed=cfg.seed, straggle_every=cfg.straggle_every) as server,
    ):
        print(f"policy server at {server.base_url}; training {cfg.versions} versions", flush=True)
        batch = f"learn-{uuid.uuid4().hex[:8]}"
        if kill_trainer_at is None:
            summary = await train(client, server, cfg, batch=batch, progress=_progress)
            restarts = 0
        else:
            with tempfile.TemporaryDirectory(prefix="episodes-learn-trainer-") as tmp:
                summary, restarts = await _trainer_processes(
                    client, server, cfg, batch, kill_trainer_at, Path(tmp)
                )
        receipts = await read_receipts(client.client, batch)
    summary["groups_acknowledged"] = len(receipts.acked)
    summary["acknowledged_twice"] = len(receipts.acks) - len(receipts.acked)
    summary["trainer_restarts"] = restarts
    summary.update(references(cfg))
    summary["wall_s"] = round(time.monotonic() - started, 1)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    drawn = plot(summary, out / "reward.png")
    rows = summary["versions"]
    for r in rows:
        print(
            f"version {r['policy_version']:>2}: mean reward {r['mean_reward']:.3f} over "
            f"{r['episodes']} episodes, stale groups {r['stale_groups']}"
        )
    lags = summary["lag"]
    print(
        f"version lag (on_stale {cfg.on_stale}, max_staleness {cfg.max_staleness}): max "
        f"{max(r['max_lag'] for r in lags)}, mean "
        f"{sum(r['mean_lag'] * r['groups'] for r in lags) / sum(r['groups'] for r in lags):.2f}; "
        f"groups trained {summary['groups_trained']}, acknowledged "
        f"{summary['groups_acknowledged']}, trained twice {summary['trained_twice']}, "
        f"trainer restarts {summary['trainer_restarts']}"
    )
    first = [r["mean_reward"] for r in rows[:3]]
    last = [r["mean_reward"] for r in rows[-3:]]
    print(
        f"first 3 versions {sum(first) / len(first):.3f}, last 3 {sum(last) / len(last):.3f}; "
        f"random play {summary['random_play']:.3f}, bisection {summary['bisection']:.3f}; "
        f"max |recorded - own logprob| {summary['max_logprob_diff']:.2e} over "
        f"{summary['tokens_checked']} tokens; {summary['wall_s']} s"
    )
    print(f"wrote {out / 'summary.json'}" + (f" and {out / 'reward.png'}" if drawn else ""))
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m learn", description=__doc__.split("\n")[0])
    parser.add_argument("--versions", type=int, default=Config.versions)
    parser.add_argument("--groups", type=int, default=Config.groups_per_version)
    parser.add_argument("--concurrency", type=int, default=Config.concurrency)
    parser.add_argument("--max-staleness", type=int, default=Config.max_staleness)
    parser.add_argument("--on-stale", choices=["keep", "requeue"], default=Config.on_stale)
    parser.add_argument(
        "--kill-trainer-at",
        type=int,
        default=None,
        help="SIGKILL the trainer process once this version is checkpointed, then restart it",
    )
    parser.add_argument("--lr", type=float, default=Config.lr)
    parser.add_argument("--straggle-every", type=int, default=Config.straggle_every)
    parser.add_argument("--seed", type=int, default=Config.seed)
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args()
    cfg = replace(
        Config(),
        versions=args.versions,
        groups_per_version=args.groups,
        concurrency=args.concurrency,
        max_staleness=args.max_staleness,
        on_stale=args.on_stale,
        lr=args.lr,
        straggle_every=args.straggle_every,
        seed=args.seed,
    )
    # Episodes cancelled on purpose (stale groups, the ones in flight at the end) log
    # their cancelled activities at WARNING with a traceback; the summary counts what
    # matters (failed groups), and the histories keep the rest.
    logging.getLogger("temporalio").setLevel(logging.ERROR)
    asyncio.run(run(cfg, args.out, args.kill_trainer_at))


if __name__ == "__main__":
    from episodes.client.exit import run_main

    run_main(main)
