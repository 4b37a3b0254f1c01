"""Which model a session's harness may call, and how: the spec the model proxy enforces.

The harness never chooses the model, the sampling settings or the credentials: it
calls the session's proxy (`episodes.model.proxy`) with a per-session token, and the
proxy forwards to `base_url` with `model` and `params` forced and the upstream key
read from the worker's environment variable `api_key_env`.

`token_data: true` asks the upstream for what a trainer needs to learn from the
call, in the fields vLLM's OpenAI-compatible server accepts on /v1/chat/completions
(they are not OpenAI's; the OpenAI SDK sends them as `extra_body`):

- `logprobs: true` (OpenAI's own field): per sampled token `{token, logprob, bytes,
  top_logprobs}` under `choices[].logprobs.content`;
- `return_tokens_as_token_ids: true` (vLLM): those `token` strings become
  `"token_id:<id>"`, so tokens that are not valid UTF-8 on their own stay exact;
- `return_token_ids: true` (vLLM >= 0.10.2): the response carries `prompt_token_ids`
  (the prompt exactly as the chat template tokenized it) and `choices[].token_ids`
  (the sampled ids). When streaming, `prompt_token_ids` comes in the first chunk and
  each chunk's `choices[].token_ids` holds that chunk's tokens.

Servers that do not know the vLLM fields usually ignore them (OpenAI rejects unknown
fields: leave `token_data` off there). Whatever token data comes back is kept as is
in the call record.

Policy versions: a trainer that updates the policy while episodes run names the
version it dispatches an episode at in `policy_version`. Every call records the
version of the weights that served it, from the first source that knows it: the
upstream's answer (a response header or its `system_fingerprint`, read by the rule in
`policy_version_from`), else the version the trainer gave the replica
(`upstreams[].policy_version`, set when it pushes weights to it), else the dispatch
version; the record names the source (`episodes.types.events.ModelCall`), so samples
know which policy made each token. The proxy always sends the session id upstream as header
`X-Session-ID` (routers that pin a session to one replica keep its prefix cache warm);
`cache_salt: true` adds vLLM's `cache_salt` body field, one value per policy version,
so no call reuses KV cache computed by an older policy's weights.

A fleet: `upstreams: [{base_url, weight}]` names several replicas of one model (vLLM
or SGLang servers) instead of one `base_url`. Each worker routes a session's first
call to the least-loaded healthy upstream (in-flight calls over weight), keeps the
session there (its prefix cache lives on that server) and moves it only when that
upstream fails (episodes/model/fleet.py). 429 and 503 answers slow calls down (a
per-upstream adaptive limit, `Retry-After` honoured) without being charged to
`retries`, for at most `max_throttle_s` per call.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from episodes.types.base import Seconds

# The request fields `token_data: true` adds (documented above).
TOKEN_DATA_PARAMS: dict[str, Any] = {
    "logprobs": True,
    "return_tokens_as_token_ids": True,
    "return_token_ids": True,
}


class UpstreamSpec(BaseModel):
    """One replica of the model (`model.upstreams`)."""

    model_config = ConfigDict(extra="forbid")

    base_url: str
    """OpenAI-style base URL, as `model.base_url`."""
    weight: float = Field(default=1.0, ge=0.0)
    """Its share of new sessions, relative to the others (a server with twice the
    capacity: 2). 0: drained, no new sessions (those already there stay)."""
    max_concurrency: int = Field(default=256, ge=1)
    """The most calls one worker has in flight to it at a time (the ceiling of its
    adaptive limit); calls past it wait in the worker, not charged to `retries`."""
    policy_version: int | None = Field(default=None, ge=0)
    """The policy version of the weights it serves, as the trainer knows it (set when
    it pushes weights to this replica: `client.upstreams = [...]`). Recorded on the
    calls it serves when its answers do not say (`model.policy_version_from`). A worker
    keeps, per replica, the version of the latest declaration (`policy_version_at`)
    among the specs it has started sessions with (`episodes.model.fleet`): sessions
    already running there record it from their next call on."""
    policy_version_at: float | None = None
    """When the trainer declared `policy_version` (Unix seconds, its clock). The client
    stamps it when it dispatches (`run_batch`, with `client.upstreams`) unless given,
    so a session restarted from an older spec, or started late from one, never takes
    a replica's version back, while a new training run's declarations win over an
    earlier run's. Unstamped declarations (a spec written by hand) lose to stamped
    ones; among them the highest version wins."""


class PolicyVersionFrom(BaseModel):
    """Where an upstream's answer names the version of the weights that served it
    (`model.policy_version_from`). The header is read first, then the fingerprint; a
    version is a non-negative integer. An answer that names none (a missing header, a
    fingerprint the regex does not match) falls back to the replica's version, then
    to the dispatch version (the record's `policy_version_source` says which)."""

    model_config = ConfigDict(extra="forbid")

    header: str | None = None
    """A response header (any case), e.g. `x-policy-version`: the version is its
    value's first integer (`12`, `v12`, `step-12`), or what `header_regex` picks."""
    header_regex: str | None = None
    """With `header`: a regular expression searched in its value; its first group (or
    the whole match) is the version."""
    fingerprint_regex: str | None = None
    """A regular expression searched in the answer's `system_fingerprint` (e.g.
    `policy-v(\\d+)`): its first group (or the whole match) is the version."""

    @field_validator("header_regex", "fingerprint_regex")
    @classmethod
    def _compiles(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            try:
                groups = re.compile(pattern).groups
            except re.error as e:
                raise ValueError(f"not a regular expression: {e}") from None
            if groups > 1:
                raise ValueError("at most one group: the version")
        return pattern

    @model_validator(mode="after")
    def _a_source(self) -> PolicyVersionFrom:
        if self.header_regex is not None and self.header is None:
            raise ValueError("policy_version_from.header_regex needs header")
        if self.header is None and self.fingerprint_regex is None:
            raise ValueError("policy_version_from: give header, fingerprint_regex or both")
        return self

    def read(self, headers: Mapping[str, str], response: Any) -> int | None:
        """The version the answer names (`headers`: names in lower case), or None."""
        if self.header is not None:
            value = headers.get(self.header.lower())
            if value is not None:
                found = _version_in(self.header_regex or r"\d+", value)
                if found is not None:
                    return found
        if self.fingerprint_regex is not None and isinstance(response, dict):
            fingerprint = response.get("system_fingerprint")
            if isinstance(fingerprint, str):
                return _version_in(self.fingerprint_regex, fingerprint)
        return None


def _version_in(pattern: str, text: str) -> int | None:
    match = re.search(pattern, text)
    if match is None:
        return None
    found = match.group(1) if match.re.groups else match.group(0)
    return int(found) if found is not None and found.isdigit() else None


class ModelSpec(BaseModel):
    """The model behind a session's proxy."""

    model_config = ConfigDict(extra="forbid")

    base_url: str | None = None
    """OpenAI-style base URL, ending where `/chat/completions` is appended
    ("http://h:8000/v1"): one upstream. Give this or `upstreams`."""
    upstreams: list[UpstreamSpec] | None = Field(default=None, min_length=1)
    """Several replicas of the model, routed per session (see the module doc)."""
    model: str
    """Forced on every call, whatever the harness asked for."""
    api_key_env: str | None = None
    """The worker's environment variable holding the upstream key (None: send no
    key)."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Sampling settings forced on every call (temperature, max_tokens, top_p, seed,
    ...): they override the harness's values so every episode of a batch samples
    alike."""
    retries: int = Field(default=3, ge=0, le=20)
    """Extra attempts after a 429, a 5xx, a timeout or a connection error."""
    timeout_s: Seconds = 120.0
    """Per upstream attempt (connect, and each read while streaming)."""
    max_throttle_s: Seconds = 300.0
    """The longest one call waits on 429 / 503 answers (and for a place under an
    upstream's adaptive limit) before they count against `retries`."""
    token_data: bool = False
    """Ask the upstream for token ids and logprobs (vLLM fields, see the module doc)."""
    policy_version: int | None = Field(default=None, ge=0)
    """The policy version the episode is dispatched at (the trainer's version when it
    started it: `client.policy_version`), recorded on every model call as
    `dispatch_version`, and as its `policy_version` when neither the answer nor the
    replica says which weights served it (see the module doc)."""
    policy_version_from: PolicyVersionFrom | None = None
    """How to read the serving weights' version from each answer, e.g. `{header:
    x-policy-version}` or `{fingerprint_regex: "policy-v(\\d+)"}` (None: answers are not
    read for it)."""
    replay_bytes: bool = True
    """Record each streamed call's server-sent events as the harness got them (`raw`),
    so an exact replay (a restart, a fork) answers with the same bytes; off: the
    record keeps the folded response only, and a replay sends it as one chunk per
    choice (the same content, token ids and logprobs; about half the record). A plain
    call's body is kept when `json.dumps` of its response does not give it back."""
    cache_salt: bool = False
    """Send vLLM's `cache_salt` (one value per `policy_version`) so the upstream never
    reuses prefix-cache KV computed under an older policy's weights."""

    @model_validator(mode="after")
    def _one_shape(self) -> ModelSpec:
        if (self.base_url is None) == (self.upstreams is None):
            raise ValueError(
                "model: give either base_url (one upstream) or upstreams: [{base_url, weight}]"
            )
        urls = [u.base_url for u in self.upstreams or []]
        if len(set(urls)) != len(urls):
            raise ValueError("model.upstreams: each base_url once")
        return self

    @model_validator(mode="after")
    def _salt_needs_a_version(self) -> ModelSpec:
        if self.cache_salt and self.policy_version is None:
            raise ValueError(
                "model.cache_salt: true needs model.policy_version (the salt is per version)"
            )
        return self

    def targets(self) -> list[UpstreamSpec]:
        """The upstreams to route over (`base_url` alone: a fleet of one)."""
        if self.upstreams is not None:
            return list(self.upstreams)
        assert self.base_url is not None
        return [UpstreamSpec(base_url=self.base_url)]

    def enforced(self) -> dict[str, Any]:
        """The fields the proxy writes over every request body."""
        forced: dict[str, Any] = {}
        if self.token_data:
            forced.update(TOKEN_DATA_PARAMS)
        forced.update(self.params)
        forced["model"] = self.model
        if self.cache_salt:
            forced["cache_salt"] = f"episodes-policy-{self.policy_version}"
        return forced
