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
version it serves in `policy_version`; every call records it, so samples know which
policy made their tokens. The proxy always sends the session id upstream as header
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

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

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
    """The version of the policy the upstream serves, recorded on every model call (a
    trainer bumps it with each weight update it pushes)."""
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
