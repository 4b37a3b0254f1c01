"""TRL's `rollout_func` over durable episodes: each prompt is one episode, one row.

    from episodes.integrations.trl import dataset_rows, episode_reward, rollout_func
    from episodes.specfile import load_spec

    spec = load_spec("examples/kv-agent.yaml")     # model: your `vllm serve` (/v1)
    trainer = GRPOTrainer(
        model=...,
        train_dataset=Dataset.from_list(dataset_rows(spec)),   # {"prompt": task id}
        reward_funcs=episode_reward,
        rollout_func=rollout_func(spec),
        args=GRPOConfig(...),
    )

TRL's contract (`GRPOTrainer(rollout_func=...)`, experimental in TRL): the function
gets the prompts of this process's slice (each already repeated `num_generations`
times) and the trainer, and returns a dict of per-prompt lists with `prompt_ids`,
`completion_ids` and `logprobs`; `env_mask` (1 where the model sampled the token) marks
what the loss trains on; every other key reaches the reward functions as a keyword.
Here each prompt names a task of the spec (`task_of` maps anything else); its episode
runs on the episodes workers (a lost worker replays it), its samples come from the
calls the model proxy recorded (`episodes.integrations.rows`), and the row is its
only sample: an episode whose samples split (a template that drops earlier reasoning)
does not fit one row and raises `EpisodeSplit`, unless `on_split="last"`.

The episodes' model calls go to the spec's `model.base_url` (or `base_url=`): an
OpenAI-compatible server returning token ids (`vllm serve ... --return-tokens-as-token-ids`).
TRL's own `trl vllm-serve` has no `/v1/chat/completions` route, so the episodes cannot
sample from it: keep the served weights current yourself (docs/integrations/trl.md).
Nothing here imports `trl` (it pulls torch).
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

from episodes.client import EpisodesClient
from episodes.client.blocking.session import LoopThread
from episodes.integrations.rows import OnSplit, Row, point_at, run_row
from episodes.types.results import Task
from episodes.types.spec import EpisodeSpec

__all__ = ["EpisodesRollout", "dataset_rows", "episode_reward", "rollout_func"]


def dataset_rows(spec: EpisodeSpec) -> list[dict[str, str]]:
    """The spec's tasks as TRL dataset rows, `{"prompt": task id}`
    (`datasets.Dataset.from_list(...)`)."""
    return [{"prompt": task.id} for task in spec.load_tasks()]


def episode_reward(episode_reward: list[float], **kwargs: Any) -> list[float]:
    """A TRL reward function: each row's episode reward (the `episode_reward` field the
    rollout returned)."""
    return [float(r) for r in episode_reward]


class EpisodesRollout:
    """The callable `rollout_func(...)` returns: `(prompts, trainer) -> dict of lists`."""

    def __init__(
        self,
        spec: EpisodeSpec,
        *,
        client: EpisodesClient | None = None,
        address: str | None = None,
        namespace: str | None = None,
        task_queue: str | None = None,
        base_url: str | None = None,
        model: str | None = None,
        params: dict[str, Any] | None = None,
        batch_id: str | None = None,
        on_split: OnSplit = "raise",
        task_of: Callable[[Any], Task] | None = None,
    ) -> None:
        self.spec = spec
        self.tasks = {task.id: task for task in spec.load_tasks()}
        self.base_url = base_url
        self.model = model
        self.params = params or {}
        self.batch_id = batch_id or spec.name
        self.on_split: OnSplit = on_split
        self.task_of = task_of
        self._client = client
        self.address, self.namespace, self.task_queue = address, namespace, task_queue
        self._loop: LoopThread | None = None
        self._sync_client: EpisodesClient | None = None
        self.calls = 0

    async def connect(self) -> EpisodesClient:
        return await EpisodesClient.connect(
            self.address, namespace=self.namespace, task_queue=self.task_queue
        )

    def task(self, prompt: Any) -> Task:
        if self.task_of is not None:
            return self.task_of(prompt)
        if isinstance(prompt, str) and prompt in self.tasks:
            return self.tasks[prompt]
        raise KeyError(
            f"prompt {prompt!r} names no task of spec {self.spec.name!r}: the dataset's "
            "prompt column holds task ids (dataset_rows(spec)), or pass task_of="
        )

    def spec_for(self, trainer: Any) -> EpisodeSpec:
        """The spec as the trainer samples: its temperature and top_p (`trainer.args`),
        then `params`, over the spec's; `base_url` / `model` when given."""
        args = getattr(trainer, "args", None)
        params = {
            k: v
            for k in ("temperature", "top_p")
            if (v := getattr(args, k, None)) is not None and not isinstance(v, bool)
        }
        params.update(self.params)
        if self.spec.model is None:
            return self.spec
        return point_at(
            self.spec, self.base_url or self.spec.model.base_url or "", self.model, params
        )

    async def rows(
        self, prompts: list[Any], trainer: Any, client: EpisodesClient | None = None
    ) -> list[Row]:
        """The episodes of `prompts`, concurrently, in prompt order: for async callers
        (a SkyRL generator), with `client` (None: the one given at construction, else one
        connected now on the running loop)."""
        if client is None:
            if self._client is None:
                self._client = await self.connect()
            client = self._client
        spec = self.spec_for(trainer)
        self.calls += 1
        batch = f"{self.batch_id}-trl-{self.calls}-{uuid.uuid4().hex[:8]}"
        seen: Counter[str] = Counter()
        runs = []
        for prompt in prompts:
            task = self.task(prompt)
            runs.append(
                run_row(client, spec, task, seen[task.id], batch_id=batch, on_split=self.on_split)
            )
            seen[task.id] += 1  # a repeated prompt (num_generations) is the task's next sample
        return list(await asyncio.gather(*runs))

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        """TRL's rollout_func: one row per prompt, in order."""
        if self._loop is None or self._loop.closed:
            # TRL calls from plain threads: a private loop, and a client made on it.
            self._loop = LoopThread()
            self._sync_client = self._loop.run(self.connect())
        rows = self._loop.run(self.rows(list(prompts), trainer, self._sync_client))
        return {
            "prompt_ids": [r.prompt_ids for r in rows],
            "completion_ids": [r.completion_ids for r in rows],
            "logprobs": [r.logprobs for r in rows],
            "env_mask": [r.completion_mask for r in rows],
            "episode_reward": [r.reward for r in rows],
            "episode_termination": [r.termination for r in rows],
            "workflow_id": [r.workflow_id for r in rows],
        }

    def close(self) -> None:
        if self._loop is not None:
            self._loop.stop()
            self._loop = None


def rollout_func(
    spec: EpisodeSpec,
    *,
    client: EpisodesClient | None = None,
    address: str | None = None,
    namespace: str | None = None,
    task_queue: str | None = None,
    base_url: str | None = None,
    model: str | None = None,
    params: dict[str, Any] | None = None,
    batch_id: str | None = None,
    on_split: OnSplit = "raise",
    task_of: Callable[[Any], Task] | None = None,
) -> EpisodesRollout:
    """A TRL `rollout_func` running each prompt as a durable episode of `spec`.

    Connects as the `episodes` command does (`address`, `namespace`, `task_queue`, else
    the environment and config file) on first use, on a private event loop (TRL calls it
    synchronously); `client` serves async callers of `rows()` on its own loop. `base_url` / `model` replace the spec's model upstream (None: the
    spec's), `params` its sampling settings over the trainer's temperature and top_p.
    Episodes are `<batch_id>-trl-<call>-<random>.<task>.s<k>` (batch_id: the spec's
    name), `k` counting a prompt's repeats within the call. `on_split`: see
    `episodes.integrations.rows`. An episode that failed (no tokens) raises: TRL has no
    masked row.
    """
    return EpisodesRollout(
        spec,
        client=client,
        address=address,
        namespace=namespace,
        task_queue=task_queue,
        base_url=base_url,
        model=model,
        params=params,
        batch_id=batch_id,
        on_split=on_split,
        task_of=task_of,
    )
