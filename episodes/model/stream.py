"""Server-sent events of a streamed chat completion, and the one response they add up to.

The proxy passes a streamed call's bytes through untouched and, alongside, feeds
them to an `SseParser`; `assemble()` then folds the chunks into the shape of a
non-streamed `chat.completion` (content, tool calls, logprobs, token ids, usage) so
a trainer reads streamed and non-streamed calls alike.
"""

from __future__ import annotations

import json
from typing import Any

try:  # the worker's. The in-box LLM harness has this module and the stdlib alone
    # (scripts/build-image.sh) and uses `SseParser` and `assemble` only.
    from episodes.json_depth import text_too_deep
    from episodes.model.fastjson import loads as _loads  # json.loads, faster
    from episodes.types.tuning import MAX_JSON_DEPTH
except ImportError:

    def _loads(raw: bytes | str) -> Any:
        return json.loads(raw)


class SseParser:
    """Incremental `data:` payloads of an SSE stream (events end with a blank line).

    The proxy feeds it a whole stream at once (parsed when the stream ends): one split
    of the buffer, and an event that is a single `data: ...` line costs one slice."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> list[str]:
        buffer = self._buffer + data if self._buffer else data
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n")
        events = buffer.split(b"\n\n")
        self._buffer = events.pop()  # an event not ended yet
        payloads = []
        for event in events:
            if event.startswith(b"data: ") and b"\n" not in event:
                payloads.append(event[6:].decode("utf-8", "replace"))
                continue
            data_lines = [
                line[5:].removeprefix(b" ")
                for line in event.split(b"\n")
                if line.startswith(b"data:")
            ]
            if data_lines:
                payloads.append(b"\n".join(data_lines).decode("utf-8", "replace"))
        return payloads


def stream_chunks(raw: bytes) -> tuple[list[dict[str, Any]], bool]:
    """(the JSON chunks of a whole SSE stream, whether one nests too deep to parse): as
    `parse_chunks(SseParser().feed(raw))`, in a few C calls for the usual stream.

    The usual stream is events of one `data: ` line each (the last may be `[DONE]`): its
    payloads are joined into one JSON array by one `replace`, checked for depth (from
    its brackets alone when no string holds one: `text_too_deep`), and parsed by one
    `fastjson.loads`. Anything
    else (comments, multi-line events, CRs, a payload that is not JSON on its own) takes
    the general path."""
    if raw.startswith(b"data: ") and raw.endswith(b"\n\n") and b"\r" not in raw:
        inner = raw[6:-2]
        if inner.endswith(b"\n\ndata: [DONE]"):
            inner = inner[:-14]
        events = inner.count(b"\n\ndata: ") + 1
        if inner.count(b"\n") == 2 * (events - 1) and inner != b"[DONE]":
            joined = b"[" + inner.replace(b"\n\ndata: ", b",") + b"]"
            if not text_too_deep(joined, MAX_JSON_DEPTH + 1):
                try:
                    values = _loads(joined)
                except ValueError:
                    values = None
                if isinstance(values, list) and len(values) == events:
                    return [v for v in values if isinstance(v, dict)], False
    return parse_chunks(SseParser().feed(raw))


def parse_chunks(payloads: list[str]) -> tuple[list[dict[str, Any]], bool]:
    """(the JSON chunks among SSE payloads, whether one nests too deep to parse)."""
    kept = [p for p in payloads if p.strip() != "[DONE]"]
    joined = "[" + ",".join(kept) + "]"
    if not text_too_deep(joined, MAX_JSON_DEPTH + 1):
        try:
            values = json.loads(joined)
        except ValueError:
            values = None
        # Parsed whole, the values nest no deeper than the check allowed. (Payloads that
        # are not JSON alone may still make up values together: an upstream's own data.)
        if isinstance(values, list) and len(values) == len(kept):
            return [v for v in values if isinstance(v, dict)], False
    if any(text_too_deep(p) for p in kept):
        return [], True
    return chunks_of(kept), False


def chunks_of(payloads: list[str]) -> list[dict[str, Any]]:
    """The JSON chunks among SSE payloads (`[DONE]` and non-JSON payloads are skipped).

    Parsed as one JSON array (one C call for a whole stream instead of one per chunk);
    when that fails or does not give one value per payload (a payload that is not JSON
    on its own), one by one. Hazard: callers check each payload's depth first, and the
    array's own depth is checked here: payloads that do not close their brackets add up
    (fifty `[`x100 payloads would nest 5,000 deep together and blow `json`'s recursion).
    """
    kept = [p for p in payloads if p.strip() != "[DONE]"]
    joined = "[" + ",".join(kept) + "]"
    values = None
    if not text_too_deep(joined, MAX_JSON_DEPTH + 1):
        try:
            values = json.loads(joined)
        except ValueError:
            pass
    if isinstance(values, list) and len(values) == len(kept):
        return [v for v in values if isinstance(v, dict)]
    out = []
    for p in kept:
        try:
            obj = json.loads(p)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


_META = ("id", "model", "created", "system_fingerprint")
_TEXTS = ("content", "reasoning_content", "reasoning", "refusal")


def assemble(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """Fold `chat.completion.chunk`s into one `chat.completion`-shaped dict.

    Text arrives in pieces (a token a chunk): kept in lists and joined once at the end
    (adding to a string per chunk copies it each time: quadratic in the answer)."""
    response: dict[str, Any] = {"object": "chat.completion", "choices": []}
    choices: dict[int, dict[str, Any]] = {}
    meta = list(_META)
    for chunk in chunks:
        if meta:
            for key in list(meta):
                if chunk.get(key) is not None:
                    response[key] = chunk[key]
                    meta.remove(key)
        if chunk.get("usage"):
            response["usage"] = chunk["usage"]
        if chunk.get("prompt_token_ids") is not None:  # vLLM: first chunk only
            response["prompt_token_ids"] = chunk["prompt_token_ids"]
        if chunk.get("error") is not None:
            response["error"] = chunk["error"]
        for c in chunk.get("choices") or ():
            _fold_choice(choices, c)
    for index in sorted(choices):
        choice = choices[index]
        message = choice["message"]
        calls = message.pop("_calls")
        for key, parts in message.pop("_texts").items():
            if parts:
                message[key] = "".join(parts)
        for slot in calls.values():
            fn = slot["function"]
            fn["name"], fn["arguments"] = "".join(fn["name"]), "".join(fn["arguments"])
        if calls:
            message["tool_calls"] = [calls[i] for i in sorted(calls)]
        if message["content"] is None and not calls:
            message["content"] = ""
        response["choices"].append(choice)
    return response


def _fold_choice(choices: dict[int, dict[str, Any]], c: dict[str, Any]) -> None:
    index = c.get("index", 0)
    choice = choices.get(index)
    if choice is None:
        choice = choices[index] = {
            "index": index,
            "message": {
                "role": "assistant",
                "content": None,
                "_calls": {},
                "_texts": {key: [] for key in _TEXTS},
            },
            "finish_reason": None,
        }
    delta = c.get("delta") or {}
    message = choice["message"]
    texts = message["_texts"]
    for key, value in delta.items():
        if not value:
            continue
        if key in texts:
            texts[key].append(value)
        elif key == "role":
            message["role"] = value
        elif key == "tool_calls":
            _fold_calls(message["_calls"], value)
    if c.get("finish_reason") is not None:
        choice["finish_reason"] = c["finish_reason"]
    logprobs = c.get("logprobs")
    if isinstance(logprobs, dict):
        target = choice.setdefault("logprobs", {"content": []})
        target["content"].extend(logprobs.get("content") or [])
    if c.get("token_ids") is not None:  # vLLM: this chunk's sampled ids
        choice.setdefault("token_ids", []).extend(c["token_ids"])


def _fold_calls(slots: dict[int, dict[str, Any]], calls: Any) -> None:
    for call in calls or ():
        slot = slots.setdefault(
            call.get("index", 0),
            {"id": None, "type": "function", "function": {"name": [], "arguments": []}},
        )
        if call.get("id"):
            slot["id"] = call["id"]
        if call.get("type"):
            slot["type"] = call["type"]
        fn = call.get("function") or {}
        if fn.get("name"):
            slot["function"]["name"].append(fn["name"])
        if fn.get("arguments"):
            slot["function"]["arguments"].append(fn["arguments"])
