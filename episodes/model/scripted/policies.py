"""The scripted upstream's "model": a word tokenizer and the policies that pick each
step from the conversation so far (`episodes.model.scripted.server` serves them)."""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Callable
from typing import Any

from episodes.model.scripted.chat_template import text_of as _text

Step = str | dict[str, Any]
Policy = Callable[[list[dict[str, Any]], list[dict[str, Any]]], Step]


def tokenize(text: str) -> list[str]:
    """Words with their leading whitespace: enough to look like tokens."""
    return re.findall(r"\s*\S+|\s+", text)


def token_id(token: str) -> int:
    return zlib.crc32(token.encode("utf-8")) % 100_000 + 1


def _goal(messages: list[dict[str, Any]]) -> dict[str, str]:
    """The kv goal from the first user message: a JSON object in it, or `key=value` pairs."""
    first = next((m for m in messages if m.get("role") == "user"), None)
    text = _text(first.get("content")) if first else ""
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        try:
            obj = json.loads(text[start : end + 1])
            if isinstance(obj, dict) and isinstance(obj.get("goal"), dict):
                obj = obj["goal"]
            if isinstance(obj, dict):
                return {str(k): str(v) for k, v in obj.items()}
        except ValueError:
            pass
    return dict(re.findall(r"(\w+)\s*=\s*([^\s,;]+)", text))


def kv_policy(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Step:
    """Put each goal key with one `put` call per step, then say done."""
    names = {t.get("function", {}).get("name") for t in tools}
    done: set[str] = set()
    for m in messages:
        for call in m.get("tool_calls") or []:
            fn = call.get("function", {})
            if fn.get("name") == "put":
                try:
                    done.add(str(json.loads(fn.get("arguments") or "{}").get("key")))
                except ValueError:
                    pass
    if "put" in names:
        for key, value in _goal(messages).items():
            if key not in done:
                return {"tool_calls": [{"name": "put", "arguments": {"key": key, "value": value}}]}
    return "done"


def think_policy(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Step:
    """`kv_policy`, reasoning first: `<think>` before every answer (with
    `ChatTemplate(drop_reasoning=True)` each call's prompt drops the last one's)."""
    step = kv_policy(messages, tools)
    if isinstance(step, str):
        return f"<think>all stored</think>{step}"
    return {**step, "content": "<think>next key</think>"}


def echo_policy(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Step:
    """Reply with the last user message's text."""
    last: dict[str, Any] = next((m for m in reversed(messages) if m.get("role") == "user"), {})
    return f"you said: {_text(last.get('content'))}"


POLICIES: dict[str, Policy] = {"kv": kv_policy, "kv-think": think_policy, "echo": echo_policy}
