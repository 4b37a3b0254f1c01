"""Exact replay: a session's model proxy and tool bridge answering from a recorded run.

A restored session (after a lost worker) or a fork's branch brings a fresh harness to where a recorded
one was by sending it the recorded turn messages again (`episodes.session.restore`).
An LLM harness then calls the model and the env's tools again; live, it would sample
something else and run its tools twice. During a replay the session's services answer
those calls from the record instead, in the order they were made:

- the model proxy (`episodes.model.proxy`) matches each request by its digest (the
  whole conversation and every field sent upstream, the proxy-forced ones included;
  `cache_salt` left out, it names the policy version) against the next recorded call
  and answers with the recorded bytes: the upstream's body as the harness got it,
  whole or as the same server-sent events (`raw`, recorded since exact replay exists).
  A record without `raw` (older histories, or `model.replay_bytes: false` for a
  stream) is answered with its recorded response re-encoded: the same content, tool
  calls, token ids and logprobs, not the same bytes. No request reaches the upstream.
- the tool bridge (`episodes.tools.bridge`) answers each tool call with the recorded
  result (or error) when name and arguments match the next recorded call. An env whose
  class says `deterministic_tools = True` has its tools run again instead: their
  effects on the fresh env (its state, its box) are rebuilt by running them, in the
  recorded order, and their answers are what the record said again.

Calls are matched turn by turn: a call that does not match the next recorded one of
its turn, or a turn that ends with recorded calls it did not make (`Replay.end_turn`),
is a divergence: counted (that turn is a divergent turn:
`EpisodeResult.replay_divergences`) and, from then on, every call goes live (`on_divergence: live`, the default), or the replay
fails (`on_divergence: fail`: the restore fails as a harness failure).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from episodes.types.events import resolve_model_calls

# Fields that may differ between the recorded run and the replay without the request
# being another one: the KV-cache salt names the policy version (a fork may name a new one).
_VOLATILE = frozenset({"cache_salt"})


def request_digest(body: dict[str, Any]) -> str:
    """The digest a replay matches a model request by: the body as sent upstream, its
    whole conversation in `messages`, volatile fields left out, keys sorted."""
    kept = {k: v for k, v in body.items() if k not in _VOLATILE}
    text = json.dumps(kept, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def tool_digest(name: Any, arguments: Any) -> str:
    text = json.dumps([name, arguments], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Answer:
    """What the proxy sends back for a replayed call."""

    status: int
    body: bytes
    stream: bool
    content_type: str = "application/json"

    def send(self, request: Any) -> None:
        """Answer the harness's request (`episodes.model.serve.Request`) as the upstream did."""
        if not self.stream:
            return request.respond(self.status, self.body, self.content_type)
        request.start_stream()
        with contextlib.suppress(ConnectionError):
            request.send(self.body)
        request.end()


class Divergence(Exception):
    """A call that does not match the record, under `on_divergence: fail`."""


def raw_of(record: dict[str, Any]) -> bytes | None:
    raw = record.get("raw")
    return raw.encode() if isinstance(raw, str) else None


def raw_to_record(raw: bytes, response: Any, *, stream: bool) -> str | None:
    """What a call's record keeps of the bytes the harness got (`raw`), so a replay
    answers with them: None when they are the recorded response re-encoded (a plain
    answer `json.dumps` gives back byte for byte) or are not UTF-8 text."""
    if not stream and _reencodes(raw, response):
        return None
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return None


def _reencodes(raw: bytes, response: Any) -> bool:
    """Whether `json.dumps(response)` gives `raw` back. The usual misses are told without
    encoding: `json.dumps` writes ASCII only, no newline, and `": ` after a key (a
    compact server's answer, vLLM's, or a pretty-printed one is kept as it came)."""
    if not raw.isascii() or b"\n" in raw:
        return False
    if isinstance(response, dict) and response and b'": ' not in raw:
        return False
    return raw == json.dumps(response).encode()


def answer_of(record: dict[str, Any]) -> Answer | None:
    """The bytes a recorded model call answered with (None: it has nothing to replay:
    the proxy gave up on it, or the harness hung up before the answer was whole)."""
    status = record.get("status", 200)
    stream = bool(record.get("stream"))
    response = record.get("response")
    if status == 502 or response is None or (status < 300 and record.get("error")):
        return None
    raw = raw_of(record)
    if raw is None:
        raw = _reencoded(response, stream and status < 300)
    if stream and status < 300:
        return Answer(200, raw, True, "text/event-stream")
    return Answer(status, raw, False)


def _reencoded(response: Any, stream: bool) -> bytes:
    if not stream:
        if isinstance(response, str):  # a 4xx body kept as its text
            return json.dumps({"error": {"message": response}}).encode()
        return json.dumps(response).encode()
    return synthetic_stream(response)


def synthetic_stream(response: dict[str, Any]) -> bytes:
    """A recorded (folded) streamed answer as server-sent events: one chunk per choice
    holding its whole message, logprobs and token ids, then the usage chunk."""
    meta: dict[str, Any] = {k: response[k] for k in ("id", "model", "created") if k in response}
    events = []
    first = True
    for choice in response.get("choices") or ():
        message = dict(choice.get("message") or {})
        calls = message.pop("tool_calls", None)
        delta = {k: v for k, v in message.items() if v is not None}
        if calls:
            delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(calls)]
        out: dict[str, Any] = {
            "index": choice.get("index", 0),
            "delta": delta,
            "finish_reason": choice.get("finish_reason"),
        }
        if choice.get("logprobs") is not None:
            out["logprobs"] = choice["logprobs"]
        if choice.get("token_ids") is not None:
            out["token_ids"] = choice["token_ids"]
        chunk: dict[str, Any] = {**meta, "object": "chat.completion.chunk", "choices": [out]}
        if first and response.get("prompt_token_ids") is not None:
            chunk["prompt_token_ids"] = response["prompt_token_ids"]
        first = False
        events.append(chunk)
    if response.get("usage") is not None:
        events.append(
            {**meta, "object": "chat.completion.chunk", "choices": [], "usage": response["usage"]}
        )
    body = b"".join(b"data: %s\n\n" % json.dumps(e).encode() for e in events)
    return body + b"data: [DONE]\n\n"


class Replay:
    """The recorded calls of the turns being replayed, answered in order, turn by turn,
    until the first divergence. Shared by the session's proxy and bridge (one order of
    calls). `turns`: each replayed turn's recorded events, in order.

    A turn's calls are matched against that turn's record only, and `end_turn()` checks
    that it made them all: a turn that makes more calls, other ones, or fewer than its
    record holds is the divergent one (not the turn after it)."""

    def __init__(
        self,
        turns: list[list[Any]],
        *,
        deterministic_tools: bool = False,
        on_divergence: str = "live",
    ) -> None:
        self.deterministic_tools = deterministic_tools
        self.fail = on_divergence == "fail"
        # resolve_model_calls keeps the conversations (a call may extend one of an earlier
        # turn: resolved over all of them); the raw bytes are the events' own.
        events = [e for turn in turns for e in turn]
        raws = [e for e in events if isinstance(e, dict) and e.get("kind") == "model_call"]
        planned: list[tuple[str, Answer | None]] = []
        for call, event in zip(resolve_model_calls(events), raws, strict=True):
            if not call.messages_complete:  # its conversation was not kept: never matches
                planned.append(("", None))
                continue
            body = dict(call.request)
            if "messages" in body or call.extends is not None:
                body["messages"] = call.full_messages
            planned.append((request_digest(body), answer_of(event)))
        self._model: list[list[tuple[str, Answer | None]]] = []
        self._tools: list[list[tuple[str, dict[str, Any]]]] = []
        for turn in turns:
            calls = sum(1 for e in turn if isinstance(e, dict) and e.get("kind") == "model_call")
            self._model.append(planned[:calls])
            planned = planned[calls:]
            self._tools.append(
                [
                    (tool_digest(e.get("name"), e.get("arguments")), e)
                    for e in turn
                    if isinstance(e, dict) and e.get("kind") == "tool_call"
                ]
            )
        self.turn = 0  # the index (in `turns`) of the turn being replayed
        self._next_model = 0  # of that turn's calls
        self._next_tool = 0
        self.live = False  # diverged: every call from now on goes live
        self.divergences = 0  # calls that did not match (counted once: then live)
        self.answered = 0  # model calls answered from the record
        self.why: str | None = None

    def _recorded(self) -> tuple[list[tuple[str, Answer | None]], list[tuple[str, Any]]]:
        """The current turn's recorded model and tool calls (none past the last turn)."""
        if self.turn >= len(self._model):
            return [], []
        return self._model[self.turn], self._tools[self.turn]

    @property
    def done(self) -> bool:
        """Diverged (live from here), or every turn's calls replayed."""
        return self.live or self.turn >= len(self._model)

    def _diverged(self, why: str) -> None:
        if not self.live:
            self.live = True
            self.divergences += 1
            self.why = why

    def diverge(self, why: str) -> None:
        self._diverged(why)
        if self.fail:
            raise Divergence(why)

    def end_turn(self) -> None:
        """The current turn's harness answered: a divergence if it made fewer calls than
        its record holds (counted, not raised: the caller checks `divergences`); then
        calls are the next turn's (a harness's calls between turns were recorded there)."""
        model, tools = self._recorded()
        if not self.live and (self._next_model < len(model) or self._next_tool < len(tools)):
            self._diverged(
                f"turn {self.turn} made {self._next_model} of its {len(model)} recorded model "
                f"call(s) and {self._next_tool} of its {len(tools)} tool call(s)"
            )
        self.turn += 1
        self._next_model = self._next_tool = 0

    def model(self, sent: dict[str, Any]) -> Answer | None:
        """The recorded answer to this request (None: answer it live)."""
        if self.live:
            return None
        recorded, _ = self._recorded()
        i = self._next_model
        if i >= len(recorded):
            self.diverge(f"turn {self.turn}: model call {i + 1} was not in the record")
            return None
        digest, answer = recorded[i]
        if digest != request_digest(sent):
            self.diverge(f"turn {self.turn}: model call {i + 1} differs from the recorded request")
            return None
        self._next_model += 1
        if answer is None:
            self.diverge(f"turn {self.turn}: model call {i + 1} has no recorded answer")
            return None
        self.answered += 1
        return answer

    def tool(self, name: str, arguments: Any) -> dict[str, Any] | None:
        """The recorded call of this tool (its `result` or `error`), None: run it."""
        if self.live:
            return None
        _, recorded = self._recorded()
        i = self._next_tool
        if i >= len(recorded) or recorded[i][0] != tool_digest(name, arguments):
            self.diverge(f"turn {self.turn}: tool call {i + 1} ({name}) differs from the record")
            return None
        self._next_tool += 1
        return None if self.deterministic_tools else recorded[i][1]


def recorded_tool_result(value: Any, output_schema: dict[str, Any] | None = None) -> Any:
    """A recorded tool answer (as `bridge._jsonable` kept it) as the MCP tool result the
    tool gave: the tool's `output_schema` says whether it was structured (FastMCP wraps
    a non-object value as `{"result": value}` and says so in the schema); its text is
    FastMCP's (compact JSON for a value that is not text)."""
    from fastmcp.tools.base import ToolResult
    from mcp.types import TextContent

    def text(v: Any) -> list[Any]:
        body = v if isinstance(v, str) else json.dumps(v, separators=(",", ":"), ensure_ascii=False)
        return [TextContent(type="text", text=body)]

    if output_schema is not None:
        if output_schema.get("x-fastmcp-wrap-result"):
            return ToolResult(
                content=text(value),
                structured_content={"result": value},
                meta={"fastmcp": {"wrap_result": True}},
            )
        if isinstance(value, dict):
            return ToolResult(content=text(value), structured_content=value)
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return ToolResult(content=[TextContent(type="text", text=v) for v in value])
    if (
        isinstance(value, list)
        and value
        and all(isinstance(v, dict) and "type" in v for v in value)
    ):
        from mcp.types import ContentBlock
        from pydantic import TypeAdapter

        return ToolResult(content=TypeAdapter(list[ContentBlock]).validate_python(value))
    return ToolResult(content=text(value))
