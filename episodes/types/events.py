"""A transcript's events, typed: model calls, tool calls and whatever the harness streamed.

    for call in transcript.model_calls():          # ModelCall, in the order they were made
        call.prompt_ids, call.completion_ids, call.completion_logprobs, call.finish_reason

The history keeps each event as the dict its recorder wrote (the model proxy, the
tool bridge, the harness); these models read those dicts, old and new alike:
unknown fields are kept (`extra="allow"`), missing ones take defaults. Nothing here
is written back to a history, so reading never changes what a workflow replays.

Token data is parsed from the upstream's answer in ONE place, `_token_data` below:

- vLLM (`return_token_ids`, >= 0.10.2): `response.prompt_token_ids` (the prompt as the
  chat template tokenized it) and `choices[0].token_ids` (the sampled ids; a streamed
  call's chunks were already folded into the same shape by `episodes.model.stream`);
- logprobs: `choices[0].logprobs.content[].logprob`; with vLLM's
  `return_tokens_as_token_ids` each `token` is spelt `"token_id:<id>"`, which gives the
  sampled ids when `token_ids` is absent (older vLLM);
- SGLang: its OpenAI-compatible chat endpoint returns no token ids of its own (0.5.x);
  deployments patched for RL (e.g. slime's) add them under vLLM's names, which are read
  as above. Its logprobs follow OpenAI's shape. Assumed, not tested against SGLang.

Only pydantic and the standard library (the `episodes.types` floor).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

TOKEN_ID_PREFIX = "token_id:"


# Where a model call's `policy_version` came from (see `ModelCall.policy_version_source`).
PolicyVersionSource = Literal["upstream", "replica", "dispatch"]


class _Event(BaseModel):
    # Histories hold whatever the recorder of the day wrote: tolerate what we don't know.
    model_config = ConfigDict(extra="allow")


class Usage(BaseModel):
    """The upstream's token counts (OpenAI's `usage`; extra fields kept)."""

    model_config = ConfigDict(extra="allow")

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None


class ModelCall(_Event):
    """One call through the session's model proxy (`episodes.model.proxy`).

    The recorded fields come first; the token fields after them are derived from
    `response` when the event is read (excluded from dumps: the record stays as it was).
    """

    kind: Literal["model_call"] = "model_call"
    id: str | None = None
    """The call's id among the session's calls (None: recorded before ids existed)."""
    extends: dict[str, Any] | None = None
    """The earlier call whose conversation this one extends, `{"id": ..., "messages":
    m}`: its first m messages come before `request.messages`
    (episodes/model/conversation.py). None: `request.messages` is the whole conversation."""
    request: dict[str, Any] = Field(default_factory=dict)
    """The body sent upstream (model and params forced by the proxy); with `extends`,
    its `messages` are only the ones this call added (read `messages` for them all)."""
    response: Any = None
    """The upstream's answer: a chat.completion dict (a streamed call folded into
    one), its error text for a 4xx, None when the proxy gave up."""
    usage: Usage | None = None
    ms: float = 0.0
    stream: bool = False
    attempts: int = 1
    status: int = 200
    error: str | None = None
    policy_version: int | None = None
    """The policy version of the weights that served the call, from the source
    `policy_version_source` names (None: no source knew it)."""
    policy_version_source: PolicyVersionSource | None = None
    """Where `policy_version` came from: `upstream` (the answer said, by the spec's
    `model.policy_version_from`), `replica` (the version the trainer gave the upstream
    that served it, `model.upstreams[].policy_version`) or `dispatch` (the version the
    episode was dispatched at, `model.policy_version`). A record from before sources
    existed reads as `dispatch`: its version was the dispatch version."""
    dispatch_version: int | None = None
    """The version the episode was dispatched at (`model.policy_version` when the call
    was made); a record from before this field reads its `policy_version` here."""
    upstream: str | None = None
    """The base URL of the upstream that served the call (`model.upstreams`; None:
    recorded before fleets existed)."""

    prompt_ids: list[int] | None = Field(default=None, exclude=True)
    """-- derived from `response` (see the module doc)
    ------------------------------- The prompt's token ids as the upstream's chat
    template made them."""
    completion_ids: list[int] | None = Field(default=None, exclude=True)
    """The sampled token ids of the first choice."""
    completion_logprobs: list[float] | None = Field(default=None, exclude=True)
    """One logprob per sampled token, aligned with `completion_ids`."""
    finish_reason: str | None = Field(default=None, exclude=True)
    token_data_problem: str | None = Field(default=None, exclude=True)
    """Why the token data cannot be used as it is (None: fine, or simply absent)."""
    full_messages: list[Any] | None = Field(default=None, exclude=True)
    """The whole conversation, when read through a transcript (`resolve_model_calls`)."""
    messages_complete: bool = Field(default=True, exclude=True)
    """False when the call it extends is not in what was read (capped by `record:
    truncate`, or a transcript read in part): `messages` then holds only its own."""

    @model_validator(mode="before")
    @classmethod
    def _derive(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = {**data, **_token_data(data.get("response"))}
            if "policy_version_source" not in data and data.get("policy_version") is not None:
                # Recorded before the version that served a call was told apart from
                # the dispatch version: it was the dispatch version.
                data["policy_version_source"] = "dispatch"
                data.setdefault("dispatch_version", data["policy_version"])
        return data

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The conversation the harness sent (the prompt before templating), whole: a
        call read through `Transcript.model_calls()` has its earlier messages resolved."""
        if self.full_messages is not None:
            return self.full_messages
        messages = self.request.get("messages")
        return messages if isinstance(messages, list) else []

    @property
    def reply(self) -> dict[str, Any] | None:
        """The first choice's assistant message, when there is one."""
        choice = _first_choice(self.response)
        message = choice.get("message") if choice else None
        return message if isinstance(message, dict) else None

    @property
    def ok(self) -> bool:
        """Whether the upstream answered (a completion was served to the harness)."""
        return self.status < 300 and isinstance(self.response, dict)

    @property
    def has_token_data(self) -> bool:
        return (
            self.prompt_ids is not None
            and self.completion_ids is not None
            and self.completion_logprobs is not None
            and self.token_data_problem is None
        )


def resolve_model_calls(events: list[Any]) -> list[ModelCall]:
    """The `model_call` events among `events` (in order), typed, each with its whole
    conversation in `messages`: a record that extends an earlier call gets that call's
    conversation cut to the length it names, then its own messages. Old records (whole
    requests) read as they are. Memory: the conversations share their message objects."""
    full: dict[str, list[Any]] = {}
    out = []
    for event in events:
        if not isinstance(event, dict) or event.get("kind") != "model_call":
            continue
        call = ModelCall.model_validate(event)
        own = call.request.get("messages")
        own = own if isinstance(own, list) else []
        ref = call.extends
        if isinstance(ref, dict):
            base = full.get(str(ref.get("id")))
            count = ref.get("messages")
            if base is None or not isinstance(count, int) or not 0 <= count <= len(base):
                call.messages_complete = False
                messages = own
            else:
                messages = base[:count] + own
        else:
            messages = own
        call.full_messages = messages
        if call.id is not None:
            full[call.id] = messages
        out.append(call)
    return out


class ToolCall(_Event):
    """One call of the env's tools over the session's MCP bridge (`episodes.tools.bridge`)."""

    kind: Literal["tool_call"] = "tool_call"
    name: str = ""
    arguments: Any = Field(default_factory=dict)
    result: Any = None
    """The tool's answer (structured content, text, or content blocks); absent on
    error."""
    error: str | None = None
    ms: float = 0.0


class HarnessEvent(_Event):
    """Anything else the harness streamed during a turn, fields kept as they came."""

    kind: str | None = None
    data: Any = None
    """An event that was not a JSON object (a string, a list, ...), as it came."""

    @model_validator(mode="before")
    @classmethod
    def _wrap(cls, data: Any) -> Any:
        return data if isinstance(data, dict) else {"data": data}


def _tag(value: Any) -> str:
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    return kind if kind in ("model_call", "tool_call") else "harness"


Event = Annotated[
    Annotated[ModelCall, Tag("model_call")]
    | Annotated[ToolCall, Tag("tool_call")]
    | Annotated[HarnessEvent, Tag("harness")],
    Discriminator(_tag),
]


def _first_choice(response: Any) -> dict[str, Any] | None:
    if not isinstance(response, dict):
        return None
    choices = response.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0]
    return None


def _int_list(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        return value
    return None


def _token_data(response: Any) -> dict[str, Any]:
    """The token fields of a ModelCall from the upstream's answer (see the module doc)."""
    choice = _first_choice(response)
    if choice is None:
        return {}
    assert isinstance(response, dict)
    out: dict[str, Any] = {"finish_reason": choice.get("finish_reason")}
    out["prompt_ids"] = _int_list(response.get("prompt_token_ids"))
    completion = _int_list(choice.get("token_ids"))
    logprobs = choice.get("logprobs")
    entries = logprobs.get("content") if isinstance(logprobs, dict) else None
    if isinstance(entries, list):
        values = [e.get("logprob") if isinstance(e, dict) else None for e in entries]
        if all(isinstance(v, int | float) for v in values):
            out["completion_logprobs"] = [float(v) for v in values]  # type: ignore[arg-type]
        else:
            out["token_data_problem"] = "a logprob entry has no number"
        if completion is None:
            completion = _ids_from_tokens(entries)
    out["completion_ids"] = completion
    lps = out.get("completion_logprobs")
    if completion is not None and lps is not None and len(lps) != len(completion):
        out["token_data_problem"] = f"{len(lps)} logprobs for {len(completion)} sampled tokens"
    return out


def _ids_from_tokens(entries: list[Any]) -> list[int] | None:
    """Sampled ids from logprob tokens spelt `token_id:<id>` (all of them, or None)."""
    ids = []
    for e in entries:
        token = e.get("token") if isinstance(e, dict) else None
        if not isinstance(token, str) or not token.startswith(TOKEN_ID_PREFIX):
            return None
        try:
            ids.append(int(token[len(TOKEN_ID_PREFIX) :]))
        except ValueError:
            return None
    return ids
