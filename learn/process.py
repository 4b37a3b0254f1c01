"""The trainer as a process of its own, so `--kill-trainer-at V` can SIGKILL it.

    python -m learn.process ADDRESS QUEUE POLICY_URL BATCH CHECKPOINT CONFIG_JSON [--die-at V]

`learn.__main__` keeps the dev server, the worker and the policy server in its own
process and starts this one; the trainer connects to them as a trainer on another
machine would, pushes its weights over HTTP (`RemotePolicy`: the policy server's
`POST /learn/load`), checkpoints to CHECKPOINT after each step and acknowledges its
groups on the Temporal server. With `--die-at V` it SIGKILLs itself once version V
is checkpointed, before that step's groups are acknowledged; run again without it,
it resumes from the checkpoint and the batch's receipts. Its summary goes to
CHECKPOINT with the suffix `.summary.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import urllib.request
from pathlib import Path

import numpy as np

from episodes.client import EpisodesClient
from learn.policy import Vocab
from learn.train import Config, train


class RemotePolicy:
    """The policy server seen from another process: its vocabulary and a weight push."""

    def __init__(self, base_url: str, vocab: Vocab) -> None:
        self.base_url, self.vocab = base_url, vocab

    def load(self, weights: np.ndarray, version: int) -> None:
        root = self.base_url.removesuffix("/v1")
        body = json.dumps({"version": version, "weights": np.asarray(weights).tolist()})
        request = urllib.request.Request(
            f"{root}/learn/load", body.encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            answer.read()


def summary_path(checkpoint: Path) -> Path:
    return checkpoint.with_suffix(".summary.json")


async def _main(args: argparse.Namespace) -> None:
    from episodes.client.connect import connect

    raw = json.loads(args.config)
    raw["init"] = tuple(raw["init"]) if raw.get("init") is not None else None
    cfg = Config(**raw)
    client = EpisodesClient(await connect(args.address, timeout_s=30), task_queue=args.queue)
    policy = RemotePolicy(args.policy_url, Vocab(n=cfg.n))
    checkpoint = Path(args.checkpoint)
    summary = await train(
        client, policy, cfg, batch=args.batch, checkpoint=checkpoint, die_at=args.die_at
    )
    summary_path(checkpoint).write_text(json.dumps(summary))


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m learn.process")
    for name in ("address", "queue", "policy_url", "batch", "checkpoint", "config"):
        p.add_argument(name)
    p.add_argument("--die-at", type=int, default=None)
    logging.getLogger("temporalio").setLevel(logging.ERROR)
    asyncio.run(_main(p.parse_args()))


if __name__ == "__main__":
    from episodes.client.exit import run_main

    run_main(main)
