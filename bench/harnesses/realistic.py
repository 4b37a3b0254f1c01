"""A harness that starts like real agent harnesses do: heavy imports, then echo.

Agent harnesses typically load an HTTP client, an async runtime, pydantic models,
JSON/email/urllib helpers and their own typed config before the first turn. This
one imports what the venv has of that list, builds a few pydantic models (which
compiles their validators, as a real harness's config and message types would),
then answers each turn with the message. `--respawn` mode is driven by the bench:
it replays the recorded turns before answering the new one (see bench/respawn.py).
"""

from __future__ import annotations

import asyncio  # noqa: F401
import dataclasses
import email.message
import email.parser  # noqa: F401
import http.client  # noqa: F401
import importlib
import json  # noqa: F401
import logging  # noqa: F401
import typing
import urllib.parse
import urllib.request  # noqa: F401
import uuid  # noqa: F401
from typing import Any

from episodes.harness import sdk

# Optional third-party imports a harness would usually have; whichever are installed.
OPTIONAL = ["pydantic", "httpx", "aiohttp", "requests", "yaml", "rich"]
LOADED = []
for _name in OPTIONAL:
    try:
        importlib.import_module(_name)
        LOADED.append(_name)
    except ImportError:
        pass


@dataclasses.dataclass
class Config:
    model: str = "m"
    temperature: float = 0.0


def _models() -> typing.Any:
    """Message/config models, as a real harness defines them (validators compile now)."""
    try:
        from pydantic import BaseModel
    except ImportError:
        return None

    class ToolCall(BaseModel):
        name: str
        arguments: dict[str, Any] = {}

    class Message(BaseModel):
        role: str
        content: str | list[dict[str, Any]] | None = None
        tool_calls: list[ToolCall] = []

    class Conversation(BaseModel):
        messages: list[Message] = []
        config: dict[str, Any] = {}

    return Conversation


CONVERSATION = _models()
HISTORY: list[Any] = []


def handle(turn: int, message: Any, emit: Any) -> Any:
    HISTORY.append(message)
    if CONVERSATION is not None:
        CONVERSATION(messages=[{"role": "user", "content": str(m)} for m in HISTORY[-4:]])
    return message


if __name__ == "__main__":
    sdk.serve(handle)
