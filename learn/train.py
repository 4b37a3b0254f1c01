"""The GRPO trainer: drives episodes as a user would and trains on what they recorded.

    summary = await train(EpisodesClient(client, task_queue=q), server, Config())

One batch of guess-number tasks runs through `client.run_batch(spec, groups=True,
policy_version=v, max_staleness=s)`. Every `groups_per_version` groups the trainer
takes one optimizer step on the samples of those groups (`episodes.training.samples`,
from each episode's recorded model calls: token ids, masks, logprobs), then loads the
new weights into the server and moves `client.policy_version` on. Episodes in flight
keep running across that swap: their next calls are served by the new weights (the
answer's `system_fingerprint` says which). A group more than `max_staleness`
versions behind is waited for (`on_stale="keep"`, the default: no new group starts
meanwhile) or cancelled and run again at the current version (`"requeue"`); each
group's lag (`group.staleness`) is recorded per training step.

Consumption is durable: after each step the trainer writes its checkpoint (weights,
optimizer moments, the groups it trained) and then acknowledges the step's groups
(`group.ack()`, kept on the Temporal server). A trainer that restarts from its
checkpoint runs the same batch again: the server hands it every group it did not
acknowledge, once; a group its checkpoint already trained (killed between the
checkpoint and the acknowledgements) is acknowledged, not trained again.

The loss is GRPO's: per sampled token, the advantage (reward minus the group mean,
over the group std) times the importance ratio pi_theta / pi_behaviour, clipped as
PPO does; pi_behaviour is the *recorded* logprob. Before that, every recorded logprob
is checked against the policy's own: the weights that served the call recompute the
logprob of the same token from the sample's own ids (`max_logprob_diff`).

Each token is trained against the weights that sampled it: the spec's
`policy_version_from` reads the version from each answer's `system_fingerprint`, and
the samples carry it per token (`Sample.completion_policy_versions`). Each episode's
transcript is read here (`client.transcript`) rather than through `group.samples()`:
the same samples (`samples_of`), and beside them each recorded call, checked against
the per-token versions.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from episodes.client import EpisodesClient
from episodes.client.group.staleness import OnStale
from episodes.client.group.stream import Group
from episodes.training.samples import Sample, samples_of
from episodes.types.events import ModelCall
from episodes.types.spec import EpisodeSpec, parse_spec
from learn.policy import Vocab, grad_logprob, token_logprob
from learn.server import served_version

HARNESS = Path(__file__).resolve().parent / "harness.py"


@dataclass(frozen=True)
class Config:
    versions: int = 12
    """Policy versions to run (optimizer steps: versions - 1)."""
    groups_per_version: int = 8
    samples: int = 4
    """Episodes per task: one GRPO group."""
    n: int = 31
    """Secrets are 1..n."""
    budget: int = 8
    """Guesses per episode."""
    lr: float = 1.0
    clip: float = 1.0
    """PPO clip on the ratio: wide, as one Adam step moves this tiny policy far."""
    concurrency: int = 16
    max_staleness: int = 1
    on_stale: OnStale = "keep"
    """`keep` (wait for a stale group, pace admission) or `requeue` (run it again)."""
    straggle_every: int = 10
    """The server holds one episode of every k-th task until the weights moved on twice
    (`learn.server`), so staleness happens on purpose; 0: never."""
    seed: int = 0
    init: tuple[float, ...] | None = None
    """The first version's weights (None: zeros, which is random play)."""


def make_spec(cfg: Config, base_url: str, name: str) -> EpisodeSpec:
    rng = np.random.default_rng(cfg.seed)
    # Enough tasks for every version, plus the groups in flight when training stops.
    count = cfg.versions * cfg.groups_per_version + cfg.concurrency // cfg.samples + 4
    tasks = [
        {"id": f"t{i:04d}", "data": {"secret": int(rng.integers(1, cfg.n + 1))}}
        for i in range(count)
    ]
    return parse_spec(
        {
            "name": name,
            "env": "guess-number",
            "env_args": {"low": 1, "high": cfg.n, "budget": cfg.budget},
            "tasks": tasks,
            "samples": cfg.samples,
            "max_turns": cfg.budget + 1,
            "turn_timeout_s": 120,
            "harness": {"command": [sys.executable, str(HARNESS)], "ready_timeout_s": 120},
            "model": {
                "base_url": base_url,
                "model": "learn-policy",
                "token_data": True,
                # Each call records the weights that served it, read from its answer:
                # the samples then carry a policy version per token.
                "policy_version_from": {"fingerprint_regex": r"learn-policy-v(\d+)"},
            },
        }
    )


class TrainingDataError(Exception):
    """A sample's sampled tokens do not line up with the recorded calls."""


@dataclass
class _Token:
    context: list[int]
    token: int
    recorded: float
    served_by: int


class Policy(Protocol):
    """What the trainer needs of the policy server: its vocabulary and a weight push
    (`PolicyServer` in-process, `learn.process.RemotePolicy` over HTTP)."""

    @property
    def vocab(self) -> Vocab: ...

    @property
    def base_url(self) -> str: ...

    def load(self, weights: np.ndarray, version: int) -> None: ...


class Trainer:
    def __init__(self, cfg: Config, server: Policy, checkpoint: Path | None = None) -> None:
        self.cfg = cfg
        self.vocab = server.vocab
        self.server = server
        self.weights = np.array(cfg.init or [0.0] * self.vocab.size, dtype=np.float64)
        self.snapshots: dict[int, np.ndarray] = {0: self.weights.copy()}
        self.version = 0
        self._m = np.zeros(self.vocab.size)
        self._v = np.zeros(self.vocab.size)
        self.max_logprob_diff = 0.0
        self.tokens_checked = 0
        self.mixed_calls = 0
        self.rewards: dict[int, list[float]] = defaultdict(list)
        self.stale: dict[int, int] = defaultdict(int)
        self.groups: dict[int, int] = defaultdict(int)
        self.failed_groups = 0
        self.lags: dict[int, list[int]] = defaultdict(list)  # trainer version -> lags
        self.trained: list[str] = []  # group ids in a checkpointed step (or the last version)
        self.redelivered = 0  # groups handed out again that the checkpoint had trained
        self.checkpoint = checkpoint
        if checkpoint is not None and checkpoint.exists():
            self._restore(json.loads(checkpoint.read_text()))
        server.load(self.weights, self.version)

    def save(self) -> None:
        """Write the checkpoint: everything a restarted trainer resumes from."""
        if self.checkpoint is None:
            return
        state = {
            "version": self.version,
            "weights": self.weights.tolist(),
            "m": self._m.tolist(),
            "v": self._v.tolist(),
            "snapshots": {k: w.tolist() for k, w in self.snapshots.items()},
            "max_logprob_diff": self.max_logprob_diff,
            "tokens_checked": self.tokens_checked,
            "mixed_calls": self.mixed_calls,
            "rewards": self.rewards,
            "stale": self.stale,
            "groups": self.groups,
            "failed_groups": self.failed_groups,
            "lags": self.lags,
            "trained": self.trained,
            "redelivered": self.redelivered,
        }
        tmp = self.checkpoint.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, self.checkpoint)  # whole or not at all

    def _restore(self, state: dict[str, Any]) -> None:
        self.version = state["version"]
        self.weights = np.array(state["weights"], dtype=np.float64)
        self._m, self._v = np.array(state["m"]), np.array(state["v"])
        self.snapshots = {int(k): np.array(w) for k, w in state["snapshots"].items()}
        self.max_logprob_diff = state["max_logprob_diff"]
        self.tokens_checked = state["tokens_checked"]
        self.mixed_calls = state["mixed_calls"]
        for name in ("rewards", "stale", "groups", "lags"):
            getattr(self, name).update({int(k): v for k, v in state[name].items()})
        self.failed_groups = state["failed_groups"]
        self.trained = list(state["trained"])
        self.redelivered = state["redelivered"]

    def tokens(self, sample: Sample, calls: list[ModelCall]) -> list[_Token]:
        """The sample's sampled tokens with their context, each run of mask 1 matched to
        the recorded call that sampled it (whose answer names the weights that served it).
        Raises `TrainingDataError` when the runs and the calls' sampled ids disagree."""
        answered = [c for c in calls[sample.first_call :] if c.ok][: sample.num_model_calls]
        runs = iter(answered)
        out: list[_Token] = []
        run: list[int] = []  # the current call's sampled ids not yet matched
        served: int | None = None  # the version the current call's answer names
        ids, mask, lps = sample.completion_ids, sample.completion_mask, sample.completion_logprobs
        # The version of the weights that sampled each token (the spec's
        # `policy_version_from` reads it from each answer's system_fingerprint).
        versions = sample.completion_policy_versions
        if versions is None:
            raise TrainingDataError(f"sample {sample.index} carries no per-token versions")
        for j, (tok, sampled, lp) in enumerate(zip(ids, mask, lps, strict=True)):
            if not sampled:
                if run:
                    raise TrainingDataError(f"sample {sample.index}: mask 0 inside a call's tokens")
                continue
            if not run:
                call = next(runs, None)
                if call is None:
                    raise TrainingDataError(f"sample {sample.index}: more sampled runs than calls")
                run = list(call.completion_ids or [])
                if call.policy_version_source != "upstream":
                    raise TrainingDataError(
                        "a recorded answer names no weights (system_fingerprint)"
                    )
                if call.policy_version != call.dispatch_version:
                    self.mixed_calls += 1  # served by weights newer than its dispatch
                served = served_version(call.response)
            if run.pop(0) != tok:
                raise TrainingDataError(f"sample {sample.index}: token {j} is not the call's")
            version = versions[j]
            if version is None or version != served:
                raise TrainingDataError(
                    f"sample {sample.index}: token {j}'s version {version} is not its answer's"
                )
            out.append(_Token(sample.prompt_ids + ids[:j], tok, lp, version))
        if run or next(runs, None) is not None:
            raise TrainingDataError(f"sample {sample.index}: fewer sampled runs than calls")
        return out

    def check(self, tokens: list[_Token]) -> None:
        for t in tokens:
            own = token_logprob(self.vocab, self.snapshots[t.served_by], t.context, t.token)
            self.max_logprob_diff = max(self.max_logprob_diff, abs(own - t.recorded))
            self.tokens_checked += 1

    def step(self, batch: list[tuple[float, list[_Token]]]) -> None:
        """One GRPO step on (advantage, tokens) per episode; then the new version is served."""
        grad = np.zeros(self.vocab.size)
        count = 0
        for adv, tokens in batch:
            for t in tokens:
                count += 1
                if t.token not in self.vocab.value_of:
                    continue
                now = token_logprob(self.vocab, self.weights, t.context, t.token)
                ratio = float(np.exp(now - t.recorded))
                clipped = (adv > 0 and ratio > 1 + self.cfg.clip) or (
                    adv < 0 and ratio < 1 - self.cfg.clip
                )
                if not clipped:
                    grad += adv * ratio * grad_logprob(self.vocab, self.weights, t.context, t.token)
        grad /= max(count, 1)
        self.version += 1
        k = self.version
        self._m = 0.9 * self._m + 0.1 * grad
        self._v = 0.999 * self._v + 0.001 * grad**2
        m_hat, v_hat = self._m / (1 - 0.9**k), self._v / (1 - 0.999**k)
        self.weights = self.weights + self.cfg.lr * m_hat / (np.sqrt(v_hat) + 1e-8)
        self.snapshots[k] = self.weights.copy()
        self.server.load(self.weights, k)

    def summary(self) -> dict[str, Any]:
        versions = [
            {
                "policy_version": v,
                "mean_reward": float(np.mean(self.rewards[v])),
                "episodes": len(self.rewards[v]),
                "stale_groups": self.stale[v],
            }
            for v in sorted(self.rewards)
        ]
        lags = [
            {
                "trained_at": v,
                "groups": len(self.lags[v]),
                "mean_lag": float(np.mean(self.lags[v])),
                "max_lag": max(self.lags[v]),
            }
            for v in sorted(self.lags)
            if self.lags[v]
        ]
        return {
            "versions": versions,
            "lag": lags,
            "groups_trained": len(set(self.trained)),
            "trained_twice": len(self.trained) - len(set(self.trained)),
            "groups_redelivered_after_checkpoint": self.redelivered,
            "max_logprob_diff": self.max_logprob_diff,
            "tokens_checked": self.tokens_checked,
            "calls_served_by_newer_weights": self.mixed_calls,
            "failed_groups": self.failed_groups,
            "config": self.cfg.__dict__,
        }


async def train(
    client: EpisodesClient,
    server: Policy,
    cfg: Config,
    *,
    batch: str,
    progress: Any = None,
    checkpoint: Path | None = None,
    die_at: int | None = None,
) -> dict[str, Any]:
    """Run `cfg.versions` policy versions; returns the summary `learn/summary.json` holds.
    `checkpoint`: the file the trainer resumes from (and writes after each step).
    `die_at`: SIGKILL this process once version `die_at` is checkpointed, before its
    groups are acknowledged (`--kill-trainer-at`)."""
    trainer = Trainer(cfg, server, checkpoint)
    spec = make_spec(cfg, server.base_url, batch)
    pending: list[tuple[float, list[_Token]]] = []
    taken: list[Group] = []  # the groups of the step being gathered
    stream = client.run_batch(
        spec,
        batch_id=batch,
        groups=True,
        policy_version=trainer.version,  # where the checkpoint left it
        max_staleness=cfg.max_staleness,
        on_stale=cfg.on_stale,
        concurrency=cfg.concurrency,
    )
    last = cfg.versions - 1
    done = set(trainer.trained)
    try:
        async for group in stream:
            if group.group_id in done:  # checkpointed, killed before its acknowledgement
                trainer.redelivered += 1
                await group.ack()
                continue
            await _take(client, trainer, group, pending)
            if trainer.version == last:
                # No more steps: the last version's own groups, then stop.
                trainer.trained.append(group.group_id)
                await group.ack()
                if trainer.groups[last] >= cfg.groups_per_version:
                    break
                continue
            taken.append(group)
            if len(taken) < cfg.groups_per_version:
                continue
            trainer.step(pending)
            trainer.trained += [g.group_id for g in taken]
            trainer.save()
            if die_at is not None and trainer.version == die_at:
                os.kill(os.getpid(), signal.SIGKILL)  # checkpointed, not acknowledged
            for g in taken:
                await g.ack()
            client.policy_version = trainer.version
            pending, taken = [], []
            if progress is not None:
                progress(trainer)
    finally:
        await stream.aclose()
    trainer.save()
    return trainer.summary()


async def _take(
    client: EpisodesClient,
    trainer: Trainer,
    group: Group,
    pending: list[tuple[float, list[_Token]]],
) -> None:
    version = group.policy_version or 0
    trainer.groups[version] += 1
    trainer.stale[version] += group.stale
    trainer.lags[trainer.version].append(group.staleness or 0)
    if group.failed is not None:
        trainer.failed_groups += 1
        return
    for r in group.results:
        trainer.rewards[version].append(r.reward or 0.0)
    for result, adv in zip(group.results, group.advantages(normalize_std=True), strict=True):
        transcript = await client.transcript(result.workflow_id)
        built = samples_of(transcript).require_complete(result.workflow_id)
        calls = transcript.model_calls()
        for sample in built.samples:
            tokens = trainer.tokens(sample, calls)
            trainer.check(tokens)
            if adv is not None:
                pending.append((adv, tokens))
