"""Which model a session's harness may call, and how: the spec the model proxy enforces.

The harness never chooses the model, the sampling settings or the credentials: it
calls the session's proxy (`episodes.agents.proxy`) with a per-session token, and the
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
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

# The request fields `token_data: true` adds (documented above).
TOKEN_DATA_PARAMS: dict[str, Any] = {
    "logprobs": True,
    "return_tokens_as_token_ids": True,
    "return_token_ids": True,
}


class ModelSpec(BaseModel):
    """The model behind a session's proxy."""

    model_config = ConfigDict(extra="forbid")

    # OpenAI-style base URL, ending where `/chat/completions` is appended ("http://h:8000/v1").
    base_url: str
    # Forced on every call, whatever the harness asked for.
    model: str
    # The worker's environment variable holding the upstream key (None: send no key).
    api_key_env: str | None = None
    # Sampling settings forced on every call (temperature, max_tokens, top_p, seed, ...):
    # they override the harness's values so every episode of a batch samples alike.
    params: dict[str, Any] = Field(default_factory=dict)
    # Extra attempts after a 429, a 5xx, a timeout or a connection error.
    retries: int = Field(default=3, ge=0, le=20)
    # Per upstream attempt (connect, and each read while streaming).
    timeout_s: float = Field(default=120.0, gt=0)
    # Ask the upstream for token ids and logprobs (vLLM fields, see the module doc).
    token_data: bool = False

    def enforced(self) -> dict[str, Any]:
        """The fields the proxy writes over every request body."""
        forced: dict[str, Any] = {}
        if self.token_data:
            forced.update(TOKEN_DATA_PARAMS)
        forced.update(self.params)
        forced["model"] = self.model
        return forced
