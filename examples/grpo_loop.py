"""A GRPO-style trainer loop over agent episodes: groups, advantages, policy versions.

    .venv/bin/episodes dev &                                   # Temporal + UI + a worker
    .venv/bin/python examples/grpo_loop.py                     # a stand-in model, started here
    .venv/bin/python examples/grpo_loop.py --template chatml-drop-reasoning

The loop a trainer writes: dispatch every task's samples as a group at policy version
v, take each group as soon as all its members ended (`run_batch(groups=True)`), mask
a failed group whole, compute advantages (reward minus the group's mean), build the
training samples from the recorded token ids, take a training step, move the version
on. Groups still running more than `--max-staleness` versions behind are cancelled
and dispatched again at the current version, as fresh episodes (`--on-stale requeue`,
this example's choice; `run_batch`'s default, `keep`, waits for them instead: see
docs/trainers.md, "Staleness: keep or requeue").

There is no model to train here. The model server is the scripted upstream
(`episodes.model.scripted.server`: real HTTP, a rule-based policy, a chat template that
tokenizes like a real model's), and the "training step" is a stand-in that says so and
prints what it would train on. It gets some values wrong, so rewards differ. So that a stale group shows up on every run, the
stand-in server never answers the last task's version-0 calls (a straggler replica):
that group is still running when the trainer moves on, and is re-dispatched. (A
replica that never answers is what `requeue` is for: with `keep` that group would be
waited for, and the trainer with it.)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from pathlib import Path
from typing import Any

import episodes
from episodes.model.scripted.server import POLICIES, TEMPLATES, ScriptedUpstream

HERE = Path(__file__).resolve().parent


async def train(args: argparse.Namespace, client: episodes.EpisodesClient, url: str) -> int:
    spec = episodes.load_spec(args.spec)
    assert spec.model is not None, f"{args.spec} names no model"
    # The model server, and a KV-cache salt per policy version (vLLM's `cache_salt`).
    model = spec.model.model_copy(update={"base_url": url, "cache_salt": True, "policy_version": 0})
    spec = spec.model_copy(update={"model": model})
    batch = args.batch or f"grpo-{time.strftime('%Y%m%d-%H%M%S')}"

    # -- the trainer's loop ---------------------------------------------------------------
    version = 0
    groups = client.run_batch(
        spec,
        groups=True,
        batch_id=batch,
        policy_version=version,
        max_staleness=args.max_staleness,
        on_stale=args.on_stale,
    )
    async with contextlib.aclosing(groups):
        async for group in groups:
            if group.failed:  # an infrastructure failure past its retries: mask it whole
                print(f"group {group.group_id} masked: {group.failed}", flush=True)
                continue
            advantages = group.advantages(normalize_std=True)
            samples = await group.samples()  # token ids, masks, logprobs, from history
            step(group, advantages, samples, version)
            version += 1
            client.policy_version = version  # the weights moved on: later dispatches use it
    print(f"done: batch {batch}, policy version {version}", flush=True)
    return 0


def step(group: episodes.Group, advantages: list[float | None], samples: list[Any], v: int) -> None:
    """The stand-in for a training step: what it would train on, printed."""
    rewards = [None if r.reward is None else round(r.reward, 3) for r in group.results]
    seqs = [s for built in samples for s in built.samples]
    splits = sum(built.splits for built in samples)
    tokens = sum(sum(s.completion_mask) for s in seqs)
    stale = f", re-dispatched {group.stale}x as stale" if group.stale else ""
    print(
        f"group {group.group_id} at v{group.policy_version}{stale}: rewards {rewards} "
        f"advantages {[None if a is None else round(a, 3) for a in advantages]}",
        flush=True,
    )
    print(
        f"  training step v{v} -> v{v + 1} (a stand-in, no weights change): would train "
        f"on {tokens} sampled tokens in {len(seqs)} sequences ({splits} splits)",
        flush=True,
    )


def fumbling(policy: Any, every: int = 3) -> Any:
    """The stand-in model gets every `every`-th value it stores wrong, so rewards within a
    group differ and advantages are not all zero (which sample fumbles is up to timing)."""
    calls = 0

    def fumble(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        nonlocal calls
        step = policy(messages, tools)
        if isinstance(step, dict) and step.get("tool_calls"):
            calls += 1
            if calls % every == 0:
                [call] = step["tool_calls"]
                wrong = {**call, "arguments": {**call["arguments"], "value": "oops"}}
                step = {**step, "tool_calls": [wrong]}
        return step

    return fumble


def straggler(task_id: str, release: asyncio.Event) -> Any:
    """The stand-in server's gate: task `task_id`'s version-0 calls are never answered."""

    async def gate(request: dict[str, Any]) -> None:
        session = request["headers"].get("X-Session-ID", "")
        version0 = request["body"].get("cache_salt") == "episodes-policy-0"
        if version0 and f".{task_id}.s" in session:
            await release.wait()

    return gate


async def main_async(args: argparse.Namespace) -> int:
    client = await episodes.connect(args.address, task_queue=args.task_queue)
    last = episodes.load_spec(args.spec).load_tasks()[-1].id
    release = asyncio.Event()
    upstream = ScriptedUpstream(
        policy=fumbling(POLICIES["kv-think" if "reasoning" in args.template else "kv"]),
        template=TEMPLATES[args.template],
        gate=straggler(last, release),
    )
    try:
        async with upstream:
            return await train(args, client, upstream.base_url)
    finally:
        release.set()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--address", help="Temporal frontend host:port (default: as the CLI)")
    p.add_argument("--task-queue", help="the workers' shared task queue (default: as the CLI)")
    p.add_argument("--spec", type=Path, default=HERE / "kv-agent.yaml")
    p.add_argument(
        "--batch-id", "--batch", dest="batch", help="batch id (default: a fresh one per run)"
    )
    p.add_argument("--max-staleness", type=int, default=1)
    p.add_argument("--on-stale", choices=["keep", "requeue"], default="requeue")
    p.add_argument(
        "--template",
        choices=["chatml", "chatml-drop-reasoning"],
        default="chatml",
        help="how the stand-in model tokenizes (drop-reasoning: samples split per call)",
    )
    args = p.parse_args(argv)
    try:
        return asyncio.run(main_async(args))
    except episodes.EpisodesError as e:
        print(f"grpo_loop: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    from episodes.client.exit import run_main

    run_main(main)
