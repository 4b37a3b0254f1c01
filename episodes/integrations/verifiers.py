"""A verifiers v1 taskset and Env whose rollouts are durable episodes.

One config line picks it (the package `episodes_vf` re-exports these classes, so
verifiers' loader finds them by the taskset id):

    [env.taskset]
    id = "episodes-vf"
    spec = "examples/kv-agent.yaml"     # the episodes spec whose tasks are the rows

The taskset yields one verifiers task per spec task. `EpisodesEnv.run_episode` (what
`vf-eval` and verifiers' `EnvServer`, hence prime-rl, call for each rollout) points the
spec's model upstream at the rollout's model client (`base_url`, `model`, sampling
arguments; token ids and logprobs asked for), runs the episode on the episodes workers
(Temporal: a lost worker replays it, the rollout sees latency only), builds its samples
from the calls the model proxy recorded (`episodes.training.samples`), and returns the
`Episode` verifiers expects: one trace whose branches are those samples, token for
token (`Branch.token_ids`, `sampled_mask`, `logprobs`), with the episode's reward as
`rewards["episode"]`. `on_trace` sees the trace, or prime-rl never would.

Imports `verifiers` (the `episodes[verifiers]` extra, in a venv of its own: see
docs/integrations/verifiers.md), so nothing else in the project imports this module.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import verifiers.v1 as vf
from verifiers.v1.configs.agent import resolve_agent
from verifiers.v1.configs.env import default_agent_harness
from verifiers.v1.types import AssistantMessage, Usage, UserMessage

from episodes.client import EpisodesClient
from episodes.integrations.rows import point_at, run_samples
from episodes.specfile import load_spec
from episodes.training.samples import EpisodeSamples, Sample
from episodes.types.events import ModelCall
from episodes.types.results import EpisodeResult, Task
from episodes.types.spec import EpisodeSpec

__all__ = [
    "EpisodesEnv",
    "EpisodesEnvConfig",
    "EpisodesTask",
    "EpisodesTaskData",
    "EpisodesTaskset",
    "EpisodesTasksetConfig",
    "trace_of",
]

# Terminations that are the episode's own end; any other fails the trace (`ok` False).
_ENDS = {"env_done", "max_turns"}


class EpisodesTaskData(vf.TaskData):
    """One spec task on verifiers' wire: its episodes task, whole."""

    task: dict[str, Any]
    """The episodes `Task` (`id`, `data`) the episode runs."""


class EpisodesTasksetConfig(vf.TasksetConfig):
    spec: str = ""
    """The episodes spec file (YAML) whose tasks are the rows, and which the episodes run."""
    address: str | None = None
    """The Temporal server (None: as the `episodes` command finds it: `TEMPORAL_ADDRESS`,
    the config file, 127.0.0.1:7233)."""
    namespace: str | None = None
    task_queue: str | None = None
    """The workers' task queue (None: as configured, default `episodes`)."""
    batch_id: str | None = None
    """Prefix of the rollouts' batch ids (None: the spec's name). Each rollout is its own
    episode, `<batch_id>-vf-<random>.<task>.s0`."""


class EpisodesTask(vf.Task[EpisodesTaskData]):
    pass


class EpisodesTaskset(vf.Taskset[EpisodesTask, EpisodesTasksetConfig]):
    def load(self) -> Iterator[EpisodesTask]:
        if not self.config.spec:
            raise ValueError("the episodes-vf taskset needs its spec: [env.taskset] spec = PATH")
        spec = load_spec(self.config.spec)
        for task in spec.load_tasks():
            yield EpisodesTask(
                EpisodesTaskData(id=task.id, name=task.id, task=task.model_dump(mode="json")),
                self.config.task,
            )


class EpisodesEnvConfig(vf.EnvConfig):
    # The seat that records the rollout's model, client and sampling on the trace. No
    # verifiers harness runs: the episode's harness runs on the episodes workers.
    agent: vf.AgentConfig = vf.AgentConfig.model_validate(
        {"harness": {"id": "null"}, "runtime": {"type": "subprocess"}}
    )


class EpisodesEnv(vf.Env[EpisodesEnvConfig]):
    """Each rollout is one durable episode of the taskset's spec."""

    def __init__(self, config: EpisodesEnvConfig) -> None:
        super().__init__(config)
        ts = self.taskset.config
        assert isinstance(ts, EpisodesTasksetConfig)
        self.settings: EpisodesTasksetConfig = ts
        self.spec: EpisodeSpec = load_spec(ts.spec)
        self._client: EpisodesClient | None = None

    async def client(self) -> EpisodesClient:
        if self._client is None:
            self._client = await EpisodesClient.connect(
                self.settings.address,
                namespace=self.settings.namespace,
                task_queue=self.settings.task_queue,
            )
        return self._client

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """No interception server and no shared tool servers: the episode's proxy and
        tools run on the episodes workers."""
        try:
            await self.start()
            yield
        finally:
            await self.stop()

    async def start(self) -> None:
        await self.client()

    async def stop(self) -> None:
        self._client = None

    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        raise NotImplementedError("EpisodesEnv runs each rollout in run_episode")

    async def run_episode(
        self,
        task: vf.Task,
        ctx: vf.ModelContext,
        *,
        on_trace: Callable[[vf.Trace], None] | None = None,
        on_discard: Callable[[vf.Trace], None] | None = None,
    ) -> vf.Episode:
        data = task.data
        assert isinstance(data, EpisodesTaskData)
        episode = vf.Episode(
            env=vf.EnvInfo(id=self.config.env_id),
            task=vf.TraceTask(type=type(task).__name__, data=data, key=task.key, hash=task.hash),
        )
        agent = resolve_agent(
            self.config.agent,
            model=ctx.model,
            client=ctx.client,
            sampling=ctx.sampling,
            harness=default_agent_harness(self.config.taskset.id),
        )
        try:
            spec = point_at(
                self.spec, ctx.client.base_url, ctx.model, sampling_params(ctx.sampling)
            )
            batch = f"{self.settings.batch_id or spec.name}-vf-{uuid.uuid4().hex[:12]}"
            result, built = await run_samples(
                await self.client(), spec, Task.model_validate(data.task), batch_id=batch
            )
            calls = (await (await self.client()).transcript(result.workflow_id)).model_calls()
        except Exception as e:  # a failed rollout is data on the episode, as verifiers' own
            episode.errors.append(vf.Error(type=type(e).__name__, message=str(e)))
            return episode
        trace = trace_of(result, built, calls, data, agent)
        episode.traces.append(trace)
        if on_trace is not None:
            on_trace(trace)
        episode.ok = trace.ok
        return episode


def sampling_params(sampling: vf.SamplingConfig) -> dict[str, Any]:
    """The rollout's sampling arguments as chat-completions parameters (unset ones left
    to the spec)."""
    return {k: v for k, v in sampling.model_dump().items() if v is not None}


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(p.get("text", "") for p in value if isinstance(p, dict))
    return ""


def _reply(call: ModelCall | None) -> AssistantMessage:
    """The call's first choice as an assistant message (text only: the tokens are exact)."""
    response = call.response if call is not None else None
    if isinstance(response, dict) and response.get("choices"):
        message = response["choices"][0].get("message") or {}
        return AssistantMessage(
            content=_text(message.get("content")) or None,
            reasoning_content=message.get("reasoning_content") or message.get("reasoning"),
        )
    return AssistantMessage(content=None)


def _call(node: int, call: ModelCall | None) -> vf.ModelCall:
    """The recorded call as verifiers' `ModelCall` of the assistant node it sampled."""
    usage = call.usage if call is not None else None
    return vf.ModelCall(
        node=node,
        model=call.request.get("model") if call is not None else None,
        endpoint="/chat/completions",
        usage=Usage(
            prompt_tokens=usage.prompt_tokens or 0, completion_tokens=usage.completion_tokens or 0
        )
        if usage is not None and usage.prompt_tokens is not None
        else None,
    )


def _runs(mask: list[int]) -> list[tuple[int, int, int]]:
    """Maximal runs of equal mask values: (value, start, end)."""
    runs: list[tuple[int, int, int]] = []
    start = 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            runs.append((mask[start], start, i))
            start = i
    return runs


def _branch(trace: vf.Trace, sample: Sample, calls: list[ModelCall]) -> None:
    """Append one sample to `trace` as a root-to-leaf path of nodes whose tokens, mask
    and logprobs concatenate to the sample's exactly."""
    own = calls[sample.first_call : sample.first_call + sample.num_model_calls]
    first = own[0] if own else None
    prompt = "\n\n".join(_text(m.get("content")) for m in (first.messages if first else []))
    trace.nodes.append(
        vf.MessageNode(
            message=UserMessage(content=prompt),
            token_ids=list(sample.prompt_ids),
            mask=[False] * len(sample.prompt_ids),
        )
    )
    replies = iter(own)
    for value, start, end in _runs(sample.completion_mask):
        ids = sample.completion_ids[start:end]
        parent = len(trace.nodes) - 1
        if value:
            call = next(replies, None)
            trace.nodes.append(
                vf.MessageNode(
                    parent=parent,
                    message=_reply(call),
                    sampled=True,
                    token_ids=ids,
                    mask=[True] * len(ids),
                    logprobs=sample.completion_logprobs[start:end],
                )
            )
            trace.calls.append(_call(len(trace.nodes) - 1, call))
        else:
            # What the env, the tools and the template put between two sampled turns.
            trace.nodes.append(
                vf.MessageNode(
                    parent=parent,
                    message=UserMessage(content=""),
                    token_ids=ids,
                    mask=[False] * len(ids),
                )
            )


def trace_of(
    result: EpisodeResult,
    built: EpisodeSamples,
    calls: list[ModelCall],
    data: EpisodesTaskData,
    agent: vf.AgentConfig,
) -> vf.Trace:
    """The finished episode as one verifiers trace: one branch per sample, the reward
    as `rewards["episode"]`, the episode's identity in `info`."""
    trace = vf.Trace(
        task=vf.TraceTask(type=EpisodesTask.__name__, data=data),
        agent=vf.AgentInfo(config=agent),
    )
    built.require_complete(result.workflow_id)
    for sample in built.samples:
        _branch(trace, sample, calls)
    trace.record_reward("episode", result.reward if result.reward is not None else 0.0)
    trace.info.update(
        workflow_id=result.workflow_id,
        termination=result.termination,
        samples=len(built.samples),
        splits=[s.split_reason for s in built.samples[1:]],
        restarts=result.restarts,
        turns_replayed=result.turns_replayed,
        replay_divergences=result.replay_divergences,
        turns=result.turns,
    )
    trace.ok = result.termination in _ENDS
    trace.stop(str(result.termination))
    if not trace.ok:
        trace.errors.append(
            vf.Error(type="EpisodeEnded", message=f"{result.termination}: {result.error or ''}")
        )
    return trace
