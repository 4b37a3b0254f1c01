"""One episode's model calls -> training samples, from the token ids the upstream served.

    built = samples_of(transcript)              # or build_samples(transcript.model_calls())
    built.require_complete("episode-id")        # IncompleteTokenData if a call lacks ids
    for s in built.samples:
        s.prompt_ids, s.completion_ids, s.completion_mask, s.completion_logprobs
        s.completion_policy_versions, s.min_policy_version, s.max_policy_version

Calls are taken in order. A call *extends* the current sample when its prompt ids
begin with the sample's prompt ids + completion ids so far (what a chat template does
when it renders earlier turns exactly as they were sampled): the new prompt tokens
past that prefix (tool results, the next user message, the template's framing) join
the completion with mask 0 and logprob 0.0, then the call's sampled ids with mask 1
and their logprobs. Otherwise a new sample starts and the split is counted, with its
reason: `prefix_mismatch at token i` (the first differing position of the sequence;
templates that drop earlier reasoning do this), `policy_version a -> b` (the calls'
dispatch versions differ: a fork's branches dispatched at another version than their
parent), or `after incomplete call j`.

Policy versions: each call records the version of the weights that served it
(`ModelCall.policy_version`: the upstream's word, the replica's or the dispatch
version). A sample goes on across a weight update in the middle of its episode, and
says per token which weights sampled it: `completion_policy_versions[i]` is the
version of the call whose span token i is in (its sampled tokens, and the prompt
tokens that came before them; those are mask 0 and never trained on). Per sample,
`min_policy_version` and `max_policy_version` span the calls that sampled its mask-1
tokens. A trainer weights off-policy tokens by the importance ratio against the
recorded logprobs, or drops those older than K versions (docs/trainers.md).

Text is never re-tokenized to fill a gap: a retokenized turn is not what the model
saw, and training on it teaches the wrong thing. A call without prompt ids, sampled
ids or aligned logprobs makes the episode *incomplete*: `incomplete` names each such
call (its index among the episode's model calls) and `require_complete` raises.
Calls the upstream never answered (the proxy gave up, or a 4xx) served no tokens:
they are left out and counted in `unanswered`.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from episodes.errors import EpisodesError
from episodes.truncate import MARKER
from episodes.types.events import ModelCall
from episodes.types.results import Transcript


class Sample(BaseModel):
    """One training sequence: a prompt and everything after it, aligned token by token."""

    model_config = ConfigDict(extra="forbid")

    index: int
    """Position among the episode's samples."""
    prompt_ids: list[int]
    completion_ids: list[int]
    """Every token after the prompt: sampled ones and those put in between."""
    completion_mask: list[int]
    """1 where the model sampled the token, 0 where the env, tools, user or template put it."""
    completion_logprobs: list[float]
    """The sampling logprob of each sampled token; 0.0 where the mask is 0."""
    num_model_calls: int
    first_call: int
    """Index of the sample's first model call among the episode's calls."""
    policy_version: int | None = None
    """The version its episode was dispatched at (its calls' `dispatch_version`; a
    sample never spans two). The weights that sampled each token can be newer:
    `completion_policy_versions`."""
    split_reason: str | None = None
    """Why this sample did not continue the previous one (None for the first)."""
    completion_policy_versions: list[int | None] | None = None
    """Per token of `completion_ids`, the policy version of the weights that served
    the call it came with (`ModelCall.policy_version`: see the module doc); None for
    the tokens of a call whose version nobody knew. None: no call of the sample has a
    version (none was set)."""
    min_policy_version: int | None = None
    """The oldest version that sampled any of its mask-1 tokens (None: unknown)."""
    max_policy_version: int | None = None
    """The newest version that sampled any of its mask-1 tokens (None: unknown)."""


class IncompleteCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    call: int
    """Index among the episode's model calls."""
    reason: str


class EpisodeSamples(BaseModel):
    model_config = ConfigDict(extra="forbid")

    samples: list[Sample] = Field(default_factory=list)
    splits: int = 0
    """Samples that started because the next call did not extend the previous sample."""
    incomplete: list[IncompleteCall] = Field(default_factory=list)
    unanswered: int = 0

    @property
    def complete(self) -> bool:
        return not self.incomplete

    @property
    def min_policy_version(self) -> int | None:
        """The oldest version that sampled any of the episode's trained tokens (None:
        unknown): what a group's lag is measured from."""
        known = [s.min_policy_version for s in self.samples if s.min_policy_version is not None]
        return min(known, default=None)

    @property
    def max_policy_version(self) -> int | None:
        """The newest version that sampled any of the episode's trained tokens."""
        known = [s.max_policy_version for s in self.samples if s.max_policy_version is not None]
        return max(known, default=None)

    @property
    def made_calls(self) -> bool:
        """Whether the episode made a model call at all (answered or not)."""
        return bool(self.samples or self.incomplete or self.unanswered)

    def require_complete(self, episode: str) -> EpisodeSamples:
        if self.incomplete:
            raise IncompleteTokenData(episode, self.incomplete)
        return self


def no_model_calls(what: str) -> str:
    """Why `what` (a batch, a group) has no samples when none of its episodes called."""
    return (
        f"{what}: no episode made model calls, so there are no samples: samples are the "
        "model calls the proxy records, so the spec needs a `model` its harness calls"
    )


class IncompleteTokenData(EpisodesError):
    """An episode's model calls lack the token data its samples need."""

    def __init__(self, episode: str, calls: list[IncompleteCall]) -> None:
        self.episode = episode
        self.calls = calls
        first = calls[0]
        more = f" (and {len(calls) - 1} more call(s))" if len(calls) > 1 else ""
        super().__init__(
            f"episode {episode}: model call {first.call} has no usable token data: "
            f"{first.reason}{more}; set model.token_data: true and serve from vLLM"
        )


def missing_token_data(call: ModelCall) -> str | None:
    """Why `call` cannot be part of a sample (None: it can)."""
    if call.token_data_problem:
        return call.token_data_problem
    for name, value, field in (
        ("prompt ids", call.prompt_ids, "prompt_token_ids"),
        ("sampled ids", call.completion_ids, "choices[0].token_ids"),
        ("logprobs", call.completion_logprobs, "choices[0].logprobs"),
    ):
        if value is None:
            return f"no {name} ({field})"
    return None


class _Open:
    """The sample being built."""

    def __init__(
        self, call: ModelCall, index: int, at: int, reason: str | None, prompt: bool = False
    ) -> None:
        assert call.prompt_ids is not None and call.completion_ids is not None
        assert call.completion_logprobs is not None
        n = len(call.completion_ids)
        self.versions = [call.policy_version] * n
        # The versions of the calls that sampled its mask-1 tokens (a fork's replayed
        # calls sampled none here).
        self.sampled = [] if prompt else [call.policy_version]
        self.sample = Sample(
            index=index,
            prompt_ids=list(call.prompt_ids),
            completion_ids=list(call.completion_ids),
            completion_mask=[0 if prompt else 1] * n,
            completion_logprobs=[0.0] * n if prompt else list(call.completion_logprobs),
            num_model_calls=1,
            first_call=at,
            policy_version=call.dispatch_version,
            split_reason=reason,
        )
        # prompt + completion so far: what the next prompt must begin with.
        self.sequence = call.prompt_ids + call.completion_ids

    def extend(self, call: ModelCall, replayed: bool = False) -> str | None:
        """Take `call` in and return None, or return why it does not extend this sample.
        `replayed`: its sampled tokens are prompt here (mask 0: a fork's replayed call)."""
        assert call.prompt_ids is not None and call.completion_ids is not None
        assert call.completion_logprobs is not None
        only_prompt = replayed
        s, seq, prompt = self.sample, self.sequence, call.prompt_ids
        if call.dispatch_version != s.policy_version:
            return f"policy_version {s.policy_version} -> {call.dispatch_version}"
        n = len(seq)
        if prompt[:n] != seq:
            at = next(
                (i for i, (a, b) in enumerate(zip(seq, prompt, strict=False)) if a != b), None
            )
            return f"prefix_mismatch at token {len(prompt) if at is None else at}"
        gap, m = prompt[n:], len(call.completion_ids)
        s.completion_ids += gap + call.completion_ids
        s.completion_mask += [0] * (len(gap) + m) if only_prompt else [0] * len(gap) + [1] * m
        logprobs = [0.0] * m if only_prompt else call.completion_logprobs
        s.completion_logprobs += [0.0] * len(gap) + logprobs
        self.versions += [call.policy_version] * (len(gap) + m)
        if not only_prompt:
            self.sampled.append(call.policy_version)
        s.num_model_calls += 1
        self.sequence = prompt + call.completion_ids
        return None

    def done(self) -> Sample:
        """The sample, its policy versions filled in."""
        s = self.sample
        if any(v is not None for v in self.versions):
            s.completion_policy_versions = self.versions
        known = [v for v in self.sampled if v is not None]
        if known:
            s.min_policy_version, s.max_policy_version = min(known), max(known)
        return s


def build_samples(calls: Sequence[ModelCall | None], *, replayed: int = 0) -> EpisodeSamples:
    """The samples of one episode's model calls, in order (see the module doc); None
    stands for a call whose record was lost (`samples_of`). The first `replayed` calls
    are a fork's replay of its parent's: their sampled tokens are prompt (mask 0), so a
    trainer never trains on the parent's samples twice."""
    out = EpisodeSamples()
    current: _Open | None = None
    after_gap: str | None = None  # set when an incomplete call sits before the next one
    for i, call in enumerate(calls):
        if call is None:
            out.incomplete.append(IncompleteCall(call=i, reason=CAPPED))
            after_gap = f"after incomplete call {i}"
            continue
        if not call.ok:
            out.unanswered += 1
            continue
        why = missing_token_data(call)
        if why is not None:
            out.incomplete.append(IncompleteCall(call=i, reason=why))
            after_gap = f"after incomplete call {i}"
            continue
        reason = after_gap
        if current is not None and reason is None:
            reason = current.extend(call, i < replayed)
            if reason is None:
                continue
        if current is not None:
            out.splits += 1
            out.samples.append(current.done())
        else:
            reason = None  # the episode's first sample continues nothing
        current = _Open(call, len(out.samples), i, reason, i < replayed)
        after_gap = None
    if current is not None:
        out.samples.append(current.done())
    return out


# Why a capped record counts as a missing call (see `samples_of`).
CAPPED = (
    "a model call was truncated or dropped in history by the record caps; keep turns "
    "whole with external storage (EPISODES_PAYLOADS_STORAGE)"
)


def samples_of(transcript: Transcript) -> EpisodeSamples:
    """The samples of a transcript's model calls, holes included.

    Hazard: with `record: truncate` (or no external storage) an oversized event is
    replaced in history by a marker, and events past a turn's budget by one marker
    counting them. A model call lost that way must not vanish: the next prompt would
    extend the sample over it and its sampled tokens would get mask 0, as if the env
    had written them. So a marker that was, or may have been, a model call is a
    missing call here (incomplete, never merged over). Call indexes count them.
    """
    calls: list[ModelCall | None] = []
    replayed = 0  # calls in a fork's replayed turns (its parent's)
    for t in transcript.turns[: transcript.replayed_turns]:
        replayed += sum(
            1
            for e in t.events
            if isinstance(e, dict)
            and (e.get("kind") == "model_call" or bool(e.get(MARKER) and _may_be_a_model_call(e)))
        )
    for event in transcript.events():
        if not isinstance(event, dict):
            continue
        if event.get("kind") == "model_call":
            calls.append(ModelCall.model_validate(event))
        elif event.get(MARKER) and _may_be_a_model_call(event):
            calls.append(None)
    return build_samples(calls, replayed=replayed)


def _may_be_a_model_call(marker: dict[str, object]) -> bool:
    if "dropped_events" in marker:  # whatever they were, they are gone
        return True
    preview = marker.get("preview")
    # The record's JSON starts with its kind (the proxy writes it first).
    return isinstance(preview, str) and '"kind": "model_call"' in preview[:40]
