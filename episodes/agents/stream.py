"""Server-sent events of a streamed chat completion, and the one response they add up to.

The proxy passes a streamed call's bytes through untouched and, alongside, feeds
them to an `SseParser`; `assemble()` then folds the chunks into the shape of a
non-streamed `chat.completion` (content, tool calls, logprobs, token ids, usage) so
a trainer reads streamed and non-streamed calls alike.
"""

from __future__ import annotations

import json
from typing import Any

from episodes.json_depth import text_too_deep
from episodes.types.tuning import MAX_JSON_DEPTH


class SseParser:
    """Incremental `data:` payloads of an SSE stream (events end with a blank line)."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> list[str]:
        self._buffer += data
        if b"\r" in self._buffer:
            self._buffer = self._buffer.replace(b"\r\n", b"\n")
        payloads = []
        while b"\n\n" in self._buffer:
            event, self._buffer = self._buffer.split(b"\n\n", 1)
            data_lines = [
                line[5:].removeprefix(b" ")
                for line in event.split(b"\n")
                if line.startswith(b"data:")
            ]
            if data_lines:
                payloads.append(b"\n".join(data_lines).decode("utf-8", "replace"))
        return payloads


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


def assemble(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """Fold `chat.completion.chunk`s into one `chat.completion`-shaped dict."""
    response: dict[str, Any] = {"object": "chat.completion", "choices": []}
    choices: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        for key in ("id", "model", "created", "system_fingerprint"):
            if chunk.get(key) is not None:
                response.setdefault(key, chunk[key])
        if chunk.get("usage"):
            response["usage"] = chunk["usage"]
        if chunk.get("prompt_token_ids") is not None:  # vLLM: first chunk only
            response["prompt_token_ids"] = chunk["prompt_token_ids"]
        if chunk.get("error") is not None:
            response["error"] = chunk["error"]
        for c in chunk.get("choices") or []:
            _fold_choice(choices, c)
    for index in sorted(choices):
        choice = choices[index]
        message = choice["message"]
        calls = message.pop("_calls")
        if calls:
            message["tool_calls"] = [calls[i] for i in sorted(calls)]
        if message["content"] is None and not calls:
            message["content"] = ""
        response["choices"].append(choice)
    return response


def _fold_choice(choices: dict[int, dict[str, Any]], c: dict[str, Any]) -> None:
    index = c.get("index", 0)
    choice = choices.setdefault(
        index,
        {
            "index": index,
            "message": {"role": "assistant", "content": None, "_calls": {}},
            "finish_reason": None,
        },
    )
    delta = c.get("delta") or {}
    message = choice["message"]
    if delta.get("role"):
        message["role"] = delta["role"]
    if delta.get("content"):
        message["content"] = (message["content"] or "") + delta["content"]
    for key in ("reasoning_content", "reasoning", "refusal"):
        if delta.get(key):
            message[key] = message.get(key, "") + delta[key]
    for call in delta.get("tool_calls") or []:
        slot = message["_calls"].setdefault(
            call.get("index", 0),
            {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
        )
        if call.get("id"):
            slot["id"] = call["id"]
        if call.get("type"):
            slot["type"] = call["type"]
        fn = call.get("function") or {}
        if fn.get("name"):
            slot["function"]["name"] += fn["name"]
        if fn.get("arguments"):
            slot["function"]["arguments"] += fn["arguments"]
    if c.get("finish_reason") is not None:
        choice["finish_reason"] = c["finish_reason"]
    logprobs = c.get("logprobs")
    if isinstance(logprobs, dict):
        target = choice.setdefault("logprobs", {"content": []})
        target["content"].extend(logprobs.get("content") or [])
    if c.get("token_ids") is not None:  # vLLM: this chunk's sampled ids
        choice.setdefault("token_ids", []).extend(c["token_ids"])
