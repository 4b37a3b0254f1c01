"""Training data cost: typed model calls, samples and export per 1,000 episodes.

Synthetic transcripts shaped like agent episodes recorded through the proxy with
vLLM's token data: each episode makes CALLS model calls; the first prompt has PROMPT
tokens, each call samples COMPLETION tokens (ids, and logprobs spelt `token_id:<id>`)
and a tool result of GAP tokens comes before the next call, whose prompt repeats
everything before it (as the history holds it). Per stage, in this process:

- `typed`: `Transcript.model_calls()`, the recorded dicts to `ModelCall`s;
- `samples`: `build_samples` (one merged sample per episode here);
- `parquet` / `jsonl`: `export_rows` + `write_rows` for the whole batch.

Histories are not read here (that is the server's cost, `episodes export` adds it).

    python -m bench training [--quick]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import fmt_spread, spread, table
from episodes.training.export import export_rows, write_rows
from episodes.training.samples import EpisodeSamples, build_samples
from episodes.types.results import EpisodeResult, Task, Transcript, TurnRecord

PROMPT, CALLS, COMPLETION, GAP = 1000, 6, 150, 100


def _call(prompt: list[int], completion: list[int]) -> dict[str, Any]:
    entries = [
        {"token": f"token_id:{t}", "logprob": -0.01 * (t % 50), "bytes": [], "top_logprobs": []}
        for t in completion
    ]
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": "x" * len(completion)},
        "finish_reason": "tool_calls",
        "token_ids": completion,
        "logprobs": {"content": entries},
    }
    usage = {"prompt_tokens": len(prompt), "completion_tokens": len(completion)}
    return {
        "kind": "model_call",
        "request": {"model": "m", "messages": []},
        "response": {"object": "chat.completion", "prompt_token_ids": prompt, "choices": [choice]},
        "usage": usage,
        "ms": 12.5,
        "stream": False,
        "attempts": 1,
        "status": 200,
        "policy_version": 1,
    }


def transcript(seed: int) -> Transcript:
    """One synthetic agent episode (CALLS model calls, a tool result between each)."""
    base = 1000 + seed
    sequence = [(base + i) % 150_000 for i in range(PROMPT)]
    events: list[Any] = []
    for c in range(CALLS):
        completion = [(base * 7 + c * 131 + i) % 150_000 for i in range(COMPLETION)]
        events.append(_call(list(sequence), completion))
        sequence = sequence + completion + [(base + c + i) % 150_000 for i in range(GAP)]
        events.append({"kind": "tool_call", "name": "t", "arguments": {}, "result": "r", "ms": 1})
    return Transcript(task=Task(id=f"t{seed % 10}"), turns=[TurnRecord(turn=0, events=events)])


def _result(i: int) -> EpisodeResult:
    return EpisodeResult(
        workflow_id=f"b.t{i % 10}.s{i}",
        task_id=f"t{i % 10}",
        sample=i,
        env="e",
        spec_name="s",
        termination="env_done",
        turns=1,
        reward=float(i % 2),
        duration_s=1.0,
    )


def once(episodes: int) -> dict[str, float]:
    """Seconds per stage for `episodes` episodes, and bytes written."""
    typed_s = samples_s = 0.0
    done: list[tuple[EpisodeResult, EpisodeSamples]] = []
    for i in range(episodes):
        t = transcript(i)  # built outside the clocks: the history read stands in for it
        t0 = time.perf_counter()
        calls = t.model_calls()
        t1 = time.perf_counter()
        built = build_samples(calls)
        t2 = time.perf_counter()
        typed_s += t1 - t0
        samples_s += t2 - t1
        assert built.complete and len(built.samples) == 1
        done.append((_result(i), built))
    out: dict[str, float] = {"typed": typed_s, "samples": samples_s}
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in ("parquet", "jsonl"):
            path = Path(tmp) / f"b.{fmt}"
            t0 = time.perf_counter()
            write_rows(export_rows("b", done), path)
            out[fmt] = time.perf_counter() - t0
            out[f"{fmt}_bytes"] = path.stat().st_size
    return out


async def run(quick: bool = False, repeats: int | None = None) -> dict:
    episodes = 50 if quick else 1000
    repeats = repeats or (1 if quick else 3)
    per_k = 1000 / episodes
    runs = [once(episodes) for _ in range(repeats)]
    stages = ("typed", "samples", "parquet", "jsonl")
    figures = {s: spread([r[s] * per_k for r in runs]) for s in stages}
    figures["total_parquet"] = spread(
        [(r["typed"] + r["samples"] + r["parquet"]) * per_k for r in runs]
    )
    sizes = {f: runs[-1][f"{f}_bytes"] * per_k / 1e6 for f in ("parquet", "jsonl")}
    tokens = PROMPT + CALLS * COMPLETION + (CALLS - 1) * GAP
    print(
        f"training export: {episodes} episodes x {CALLS} calls, {tokens} tokens per sample, "
        f"{repeats} repeat(s); seconds per 1,000 episodes, median [min..max]"
    )
    rows = [[s, fmt_spread(figures[s], " s")] for s in (*stages, "total_parquet")]
    print(table(rows, ["stage", "per 1,000 episodes"]))
    print(
        f"  files per 1,000 episodes: parquet {sizes['parquet']:.1f} MB, jsonl {sizes['jsonl']:.1f} MB"
    )
    return {
        "episodes": episodes,
        "calls_per_episode": CALLS,
        "tokens_per_sample": tokens,
        "repeats": repeats,
        "figures": figures,
        "mb_per_1000": sizes,
    }


if __name__ == "__main__":
    asyncio.run(run(quick="--quick" in sys.argv[1:]))
