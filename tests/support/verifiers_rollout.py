"""prime-rl's call, in the verifiers venv: an `EnvServer` for the `episodes-vf` taskset on
a free port, and `EnvClient.run(...)` against it over ZMQ, as the orchestrator makes it.

    .venv-verifiers/bin/python -m tests.support.verifiers_rollout --spec S.yaml \
        --address HOST:PORT --task-queue Q --base-url URL --model M [--task N]

Prints one JSON line: the `WireEpisode`'s standing and, per trace, its branches' token
ids, sampled mask and logprobs (verifiers' own `Branch` properties), rewards and info.
Runs only where `verifiers` is installed (tests/episodes/integrations/test_verifiers.py
starts it).
"""

from __future__ import annotations

import argparse
import asyncio
import json

from verifiers.v1 import TrainClientConfig
from verifiers.v1.serve import EnvClient, EnvServer
from verifiers.v1.types import SamplingConfig
from verifiers.v1.utils.loaders import load_taskset, resolve_env_config


async def main(args: argparse.Namespace) -> dict:
    config = resolve_env_config(
        {
            "taskset": {
                "id": "episodes-vf",
                "spec": args.spec,
                "address": args.address,
                "task_queue": args.task_queue,
            }
        }
    )
    # The orchestrator owns the taskset and ships each task's data; the server rebuilds it.
    tasks = list(load_taskset(config.taskset))
    server = EnvServer(config, address="tcp://127.0.0.1:0")
    serving = asyncio.create_task(server.run())
    client = EnvClient(server.address)
    try:
        await client.wait_for_server_startup(timeout=60)
        episode = await client.run(
            TrainClientConfig(base_url=args.base_url, api_key_var="EPISODES_VF_NO_KEY"),
            args.model,
            SamplingConfig(temperature=0.0),
            tasks[args.task].data.model_dump(mode="json"),
        )
    finally:
        await client.close()
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)
    return {
        "ok": episode.ok,
        "errors": [e.message for e in episode.errors],
        "server": server.address,
        "traces": [
            {
                "ok": t.ok,
                "reward": t.reward,
                "rewards": {k: (r.score if r else None) for k, r in t.rewards.items()},
                "info": t.info,
                "stop_condition": t.stop_condition,
                "branches": [
                    {
                        "token_ids": b.token_ids,
                        "sampled_mask": b.sampled_mask,
                        "logprobs": b.logprobs,
                    }
                    for b in t.branches
                ],
            }
            for t in episode.traces
        ],
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    for flag in ("--spec", "--address", "--task-queue", "--base-url", "--model"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--task", type=int, default=0)
    print(json.dumps(asyncio.run(main(parser.parse_args()))), flush=True)
