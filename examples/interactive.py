"""Interactive sessions: the trainer is the policy and sends each turn itself.

    .venv/bin/episodes dev &                   # Temporal + UI + a worker on 127.0.0.1:7233
    .venv/bin/python examples/interactive.py

Two sessions, OpenEnv-style (`open_session` = reset, `step` = step, `close` = score
and release):

1. guess-number: the policy here is a bisection written in this script. Its guess
   goes to the live harness (the echo harness, so the guess passes through
   unchanged), and the env answers with "higher"/"lower" as the observation.
2. python-repl: the policy writes code; the REPL harness runs it in one live
   Python process, so `x` defined in step 0 is still there in step 2. The env
   compares each output with the task's expected one.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

import episodes


def guess_spec() -> episodes.EpisodeSpec:
    return episodes.parse_spec(
        {
            "name": "interactive-guess",
            "env": "guess-number",
            "env_args": {"low": 1, "high": 1000, "budget": 12},
            "tasks": [{"id": "secret-777", "data": {"secret": 777}}],
            "max_turns": 12,
            "harness": {"command": "{python} -m episodes.harness.reference.echo"},
        }
    )


def repl_spec() -> episodes.EpisodeSpec:
    return episodes.parse_spec(
        {
            "name": "interactive-repl",
            "env": "python-repl",
            "tasks": [
                {
                    "id": "area",
                    "data": {
                        "snippets": ["w = 20", "h = w + 1", "w * h"],
                        "expected": ["", "", "420"],
                    },
                }
            ],
            "harness": {"command": "{python} -m episodes.harness.reference.repl"},
        }
    )


async def play_guess_number(client: episodes.EpisodesClient, sample: int) -> None:
    spec = guess_spec()
    async with await client.open_session(spec, spec.tasks[0], sample) as session:
        obs = session.first_observation  # {"low": 1, "high": 1000, "budget": 12, ...}
        print(f"guess-number: first observation {obs}")
        low, high = obs["low"], obs["high"]
        while not session.done:
            guess = (low + high) // 2
            r = await session.step(guess)
            print(f"  step {r.turn}: sent {guess}, harness replied {r.reply}, env: {r.observation}")
            feedback = (r.observation or {}).get("feedback")
            if feedback == "higher":
                low = guess + 1
            elif feedback == "lower":
                high = guess - 1
    result = session.result
    assert result is not None
    print(f"  -> {result.termination} after {result.turns} turns, reward {result.reward}")


async def play_repl(client: episodes.EpisodesClient, sample: int) -> None:
    spec = repl_spec()
    task: episodes.Task = spec.tasks[0]
    session = await client.open_session(spec, task, sample)
    try:
        print(f"python-repl: first observation {session.first_observation!r}")
        for code in ["w = 20", "h = w + 1", "w * h"]:  # the "policy": it writes code
            r = await session.step(code)
            print(f"  step {r.turn}: {code!r} -> {r.reply!r} (done={r.done})")
    finally:
        result = await session.close()
    print(f"  -> {result.termination}, reward {result.reward}")


async def main_async(args: argparse.Namespace) -> None:
    client = await episodes.connect(
        args.address, namespace=args.namespace, task_queue=args.task_queue
    )
    await play_guess_number(client, args.sample)
    await play_repl(client, args.sample)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--address", help="Temporal frontend host:port (default: as the CLI)")
    p.add_argument("--namespace")
    p.add_argument("--task-queue", help="the workers' shared task queue (default: as the CLI)")
    p.add_argument("--sample", type=int, default=0, help="session ids end in .s<sample>")
    args = p.parse_args(argv)
    try:
        asyncio.run(main_async(args))
    except episodes.EpisodesError as e:
        print(f"interactive: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    from episodes.client.exit import run_main  # exits without the SDK's finalization crash

    run_main(main)
