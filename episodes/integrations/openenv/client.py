"""A typed OpenEnv client for `episodes serve-openenv`, as every OpenEnv environment
ships one: `EpisodeAction` in, `EpisodeObservation` out (`GenericEnvClient` speaks the
same protocol with plain dicts).

    async with EpisodeEnvClient(base_url="http://127.0.0.1:8000") as env:
        result = await env.reset(task_id="t")
        while not result.done:
            result = await env.step(EpisodeAction(message=policy(result.observation.message)))
"""

from __future__ import annotations

from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server.types import State

from episodes.integrations.openenv.env import EpisodeAction, EpisodeObservation


class EpisodeEnvClient(EnvClient[EpisodeAction, EpisodeObservation, State]):
    """OpenEnv's `EnvClient` over the `/ws` of `episodes serve-openenv`."""

    def _step_payload(self, action: EpisodeAction) -> dict[str, Any]:
        return action.model_dump()

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[EpisodeObservation]:
        observation = EpisodeObservation(
            **payload.get("observation", {}),
            done=payload.get("done", False),
            reward=payload.get("reward"),
        )
        return StepResult(observation=observation, reward=observation.reward, done=observation.done)

    def _parse_state(self, payload: dict[str, Any]) -> State:
        return State(**payload)
