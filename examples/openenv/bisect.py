"""A policy playing guess-number through `episodes serve-openenv`, with OpenEnv's own
client (`GenericEnvClient`, what TRL's and torchforge's environment clients build on).

    episodes dev &                                        # Temporal + UI + a worker
    episodes serve-openenv examples/openenv/guess-number.yaml --port 8000 &
    python examples/openenv/bisect.py --url http://127.0.0.1:8000

Each reset() opens a durable session on the next task of the spec (a workflow in the
Temporal UI and `episodes view`); each step() sends the policy's guess as one turn.
"""

from __future__ import annotations

import argparse
from typing import Any

from openenv.core import GenericEnvClient


def play(url: str, episodes: int) -> list[dict[str, Any]]:
    """Play `episodes` episodes by bisection; each one's last observation and reward."""
    ends = []
    with GenericEnvClient(base_url=url, message_timeout_s=300).sync() as env:
        for _ in range(episodes):
            result = env.reset()  # the next task of the spec (reset(task_id=...) picks one)
            first = result.observation["message"]  # {"low": 1, "high": 100, "budget": 10, ...}
            low, high = first["low"], first["high"]
            while not result.done:
                guess = (low + high) // 2
                result = env.step({"message": guess})
                feedback = (result.observation["message"] or {}).get("feedback")
                if feedback == "higher":
                    low = guess + 1
                elif feedback == "lower":
                    high = guess - 1
            obs = result.observation
            turns = obs["turn"] + 1
            reward = "none" if result.reward is None else f"{result.reward:.2f}"
            print(
                f"{obs['workflow_id']}: {obs['termination']} after {turns} "
                f"turn{'s' if turns != 1 else ''}, reward {reward}"
            )
            ends.append({**obs, "reward": result.reward})
    return ends


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8000", help="the OpenEnv server")
    p.add_argument("--episodes", type=int, default=3, help="how many episodes to play")
    args = p.parse_args(argv)
    play(args.url, args.episodes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
