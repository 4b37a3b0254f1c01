"""An RL trainer loop over agent episodes: every model call, with its tokens, per rollout.

    .venv/bin/episodes dev &                                   # Temporal + UI + a worker
    .venv/bin/python examples/agent_trainer.py --scripted      # a scripted model, started here
    .venv/bin/python examples/agent_trainer.py --model-url http://gpu-box:8000/v1 --model my-policy

Episodes stream in as they finish (`EpisodesClient.run_batch`); for each, the trainer
reads the transcript back from history and takes what a policy-gradient step needs
from its model calls with `samples_of(transcript)`: per sample the prompt's token
ids, every token after it with a mask (1 where the model sampled it) and the sampled
tokens' logprobs (vLLM returns them when `model.token_data` is on), and the reward.
`episodes export BATCH --out FILE.parquet` writes the same samples for a whole batch.
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
from episodes.model.scripted.chat_template import ChatTemplate
from episodes.model.scripted.server import ScriptedUpstream, kv_policy
from episodes.training.samples import samples_of

HERE = Path(__file__).resolve().parent


def rollout(result: episodes.EpisodeResult, transcript: episodes.Transcript) -> dict[str, Any]:
    """One rollout for the trainer: the episode's samples (token ids, mask, logprobs)."""
    calls = transcript.model_calls()
    # Fails (IncompleteTokenData, naming the call) rather than re-tokenizing a gap.
    built = samples_of(transcript).require_complete(result.workflow_id)
    return {
        "episode": result.workflow_id,
        "reward": result.reward,
        "calls": len(calls),
        "samples": built.samples,
    }


async def train(args: argparse.Namespace, model_url: str) -> int:
    spec = episodes.load_spec(args.spec)
    assert spec.model is not None, f"{args.spec} names no model"
    model = spec.model.model_copy(update={"base_url": model_url, "model": args.model})
    spec = spec.model_copy(update={"model": model})
    batch = args.batch or f"agent-trainer-{time.strftime('%Y%m%d-%H%M%S')}"
    client = await episodes.connect(args.address, task_queue=args.task_queue)
    rollouts = []
    results = client.run_batch(spec, batch_id=batch, concurrency=args.concurrency)
    async with contextlib.aclosing(results):
        async for result in results:
            r = rollout(result, await client.transcript(result.workflow_id))
            rollouts.append(r)
            tokens = sum(sum(s.completion_mask) for s in r["samples"])
            print(
                f"{result.task_id}#{result.sample} {result.termination} reward={result.reward} "
                f"model calls={r['calls']} samples={len(r['samples'])} sampled tokens={tokens}",
                flush=True,
            )
    print(f"done: {len(rollouts)} rollouts, batch {batch}", flush=True)
    return 0


async def main_async(args: argparse.Namespace) -> int:
    if not args.scripted:
        return await train(args, args.model_url)
    # A chat template that tokenizes like a real model's, so calls merge into samples.
    async with ScriptedUpstream(policy=kv_policy, template=ChatTemplate()) as upstream:
        return await train(args, upstream.base_url)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--address", help="Temporal frontend host:port (default: as the CLI)")
    p.add_argument("--task-queue", help="the workers' shared task queue (default: as the CLI)")
    p.add_argument("--spec", type=Path, default=HERE / "kv-agent.yaml")
    p.add_argument(
        "--batch-id", "--batch", dest="batch", help="batch id (default: a fresh one per run)"
    )
    p.add_argument("--concurrency", type=int)
    p.add_argument("--model-url", default="http://127.0.0.1:8765/v1")
    p.add_argument("--model", default="scripted")
    p.add_argument("--scripted", action="store_true", help="start a scripted model here")
    args = p.parse_args(argv)
    try:
        return asyncio.run(main_async(args))
    except episodes.EpisodesError as e:
        print(f"agent_trainer: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    from episodes.client.exit import run_main

    run_main(main)
