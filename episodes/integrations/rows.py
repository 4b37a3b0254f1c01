"""One durable episode as one trainer row, and a spec pointed at the trainer's server.

Every trainer integration does the same two things around an episode:

- `point_at(spec, base_url, model, params)`: the spec's model upstream becomes the
  server the trainer samples from (its vLLM's OpenAI-compatible `/v1`), with token ids
  and logprobs asked for, so each recorded call carries what the trainer needs;
- `run_row(client, spec, task)`: the episode runs durably (a lost worker replays it,
  the caller sees latency only) and comes back as one `Row`: the sample
  `episodes.training.samples` built from the calls the proxy recorded, its mask and
  logprobs, and the episode's reward.

A trainer row is one token sequence. An episode is one sequence only while each model
call's prompt extends the one before it token for token; a chat template that drops
earlier reasoning, a truncated history or a policy version change starts a new sample
(`split_reason`). Such an episode does not fit one row: `on_split="raise"` (the
default) says so with `EpisodeSplit`, `on_split="last"` keeps the last sample only
(the final context, which the reward judged, without the earlier ones). Trainers that
take several sequences per episode (verifiers' branches) take `samples` whole instead.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from episodes.client import EpisodesClient
from episodes.errors import EpisodesError
from episodes.training.samples import EpisodeSamples, samples_of
from episodes.types.model import ModelSpec
from episodes.types.results import EpisodeResult, Task
from episodes.types.spec import EpisodeSpec

OnSplit = Literal["raise", "last"]


class EpisodeSplit(EpisodesError):
    """An episode whose samples split where the trainer takes one sequence per episode."""


class Row(BaseModel):
    """One episode as one training sequence (TRL's rollout_func row, SkyRL's and verl's
    per-trajectory output)."""

    model_config = ConfigDict(extra="forbid")

    prompt_ids: list[int]
    completion_ids: list[int]
    completion_mask: list[int]
    """1 where the model sampled the token, 0 where the env, tools or template put it."""
    logprobs: list[float]
    """The sampling logprob of each completion token; 0.0 where the mask is 0."""
    reward: float
    """The episode's reward (0.0 when it has none: look at `termination`)."""
    termination: str
    workflow_id: str
    samples: int
    """How many samples the episode's calls made (more than 1: it split)."""


def point_at(
    spec: EpisodeSpec,
    base_url: str,
    model: str | None = None,
    params: dict[str, Any] | None = None,
    *,
    token_data: bool = True,
) -> EpisodeSpec:
    """`spec` with its model upstream replaced by the trainer's server: `base_url` (the
    OpenAI-style base, `http://host:8000/v1`), `model` (None: the spec's), `params`
    merged over the spec's sampling settings. The key stays the spec's `api_key_env`
    (a name the worker reads, never a value)."""
    if spec.model is None:
        raise EpisodesError(
            f"spec {spec.name!r} has no model: its harness calls no model through the "
            "proxy, so there is nothing to point at the trainer's server or to train on"
        )
    data = spec.model.model_dump()
    data.update(
        base_url=base_url,
        upstreams=None,
        model=model or spec.model.model,
        params={**spec.model.params, **(params or {})},
        token_data=token_data or spec.model.token_data,
    )
    return spec.model_copy(update={"model": ModelSpec.model_validate(data)})


def row_of(result: EpisodeResult, built: EpisodeSamples, *, on_split: OnSplit = "raise") -> Row:
    """The one row of a finished episode (see the module doc for `on_split`)."""
    built.require_complete(result.workflow_id)
    if not built.samples:
        raise EpisodesError(
            f"episode {result.workflow_id} made no answered model call: no tokens to train on "
            f"(termination {result.termination})"
        )
    if len(built.samples) > 1 and on_split == "raise":
        reasons = [s.split_reason for s in built.samples[1:]]
        raise EpisodeSplit(
            f"episode {result.workflow_id} split into {len(built.samples)} samples "
            f"({', '.join(str(r) for r in reasons)}): one row cannot hold it; "
            "pass on_split='last' to train on its last sample only"
        )
    s = built.samples[-1]
    return Row(
        prompt_ids=s.prompt_ids,
        completion_ids=s.completion_ids,
        completion_mask=s.completion_mask,
        logprobs=s.completion_logprobs,
        reward=result.reward if result.reward is not None else 0.0,
        termination=result.termination,
        workflow_id=result.workflow_id,
        samples=len(built.samples),
    )


async def run_samples(
    client: EpisodesClient,
    spec: EpisodeSpec,
    task: Task,
    sample: int = 0,
    *,
    batch_id: str | None = None,
) -> tuple[EpisodeResult, EpisodeSamples]:
    """Run one episode durably and build its samples from the recorded calls."""
    result = await client.run_episode(spec, task, sample, batch_id=batch_id)
    transcript = await client.transcript(result.workflow_id)
    return result, samples_of(transcript)


async def run_row(
    client: EpisodesClient,
    spec: EpisodeSpec,
    task: Task,
    sample: int = 0,
    *,
    batch_id: str | None = None,
    on_split: OnSplit = "raise",
) -> Row:
    """Run one episode durably and return it as one row."""
    result, built = await run_samples(client, spec, task, sample, batch_id=batch_id)
    return row_of(result, built, on_split=on_split)
