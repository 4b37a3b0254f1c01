"""What the model proxy (`episodes.model.proxy`) records of a call and tells its harness.

A finished call becomes one `model_call` record handed to the proxy's `on_call`: the
request as sent upstream (its new messages only, with what they extend:
episodes/model/conversation.py), the response, timings, attempts, status, the upstream
that served it, the policy version of the weights that served it with where that came
from (`served_version`: the answer, the replica, or the dispatch version) and the
dispatch version, and, for an exact replay, the bytes the harness got (`raw`). Errors the harness sees are OpenAI-style bodies (`openai_error`).
"""

from __future__ import annotations

import inspect
import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from episodes.errors import ModelError
from episodes.model.conversation import Conversations
from episodes.types.events import PolicyVersionSource
from episodes.types.model import ModelSpec

log = logging.getLogger("episodes.model.proxy")

Callback = Callable[[Any], Any]  # sync, or returning an awaitable


def openai_error(message: str, kind: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": code, "param": None}}


async def notify(cb: Callback | None, arg: Any) -> None:
    """Call `on_call` / `on_failure`; what it raises is logged, never the harness's."""
    if cb is None:
        return
    try:
        result = cb(arg)
        if inspect.isawaitable(result):
            await result
    except Exception:
        # A broken recorder must not break the harness's call; it is the caller's bug.
        log.exception("model proxy: callback %r failed", cb)


def served_version(
    spec: ModelSpec,
    headers: Mapping[str, str] | None,
    response: Any,
    replica_version: int | None,
) -> tuple[int | None, PolicyVersionSource | None]:
    """The policy version of the weights that served a call, and its source: what the
    answer says (`spec.policy_version_from`; `headers` in lower case, None: no answer),
    else the version the trainer gave the replica that served it, else the dispatch
    version (`spec.policy_version`). (None, None): nothing knows it."""
    rule = spec.policy_version_from
    if rule is not None and headers is not None:
        said = rule.read(headers, response)
        if said is not None:
            return said, "upstream"
    if replica_version is not None:
        return replica_version, "replica"
    if spec.policy_version is not None:
        return spec.policy_version, "dispatch"
    return None, None


def call_record(
    conversations: Conversations,
    spec: ModelSpec,
    served_by: str | None,
    sent: dict[str, Any],
    response: Any,
    started: float,
    attempts: int,
    *,
    stream: bool,
    status: int = 200,
    error: str | None = None,
    raw: str | None = None,
    headers: Mapping[str, str] | None = None,
    replica_version: int | None = None,
) -> dict[str, Any]:
    """One call's record (`started`: its `time.monotonic()` when the request came in;
    `headers`: the answer's, names in lower case; `replica_version`: the served_by
    replica's `policy_version` when the call ended)."""
    version, source = served_version(spec, headers, response, replica_version)
    # The new messages only, with what they extend (episodes/model/conversation.py):
    # the record grows with the conversation, not with its square.
    call_id, messages, extends = conversations.record(sent.get("messages"))
    request = sent if messages is sent.get("messages") else {**sent, "messages": messages}
    record: dict[str, Any] = {
        "kind": "model_call",
        "id": call_id,
        "request": request,
        "response": response,
        "usage": response.get("usage") if isinstance(response, dict) else None,
        "ms": (time.monotonic() - started) * 1000,
        "stream": stream,
        "attempts": attempts,
        "status": status,
        "policy_version": version,  # of the weights that served it (`served_version`)
        "policy_version_source": source,
        "dispatch_version": spec.policy_version,
        "upstream": served_by,  # fleet.py: the upstream that served it
    }
    if extends is not None:
        record["extends"] = extends
    if error is not None:
        record["error"] = error
    if raw is not None:  # the bytes the harness got, for an exact replay
        record["raw"] = raw
    return record


def harness_error(gone: bool, slow: bool, timeout_s: float) -> str | None:
    """What a streamed call's record says the harness did (None: it read it all)."""
    if slow:
        return f"harness read the stream too slowly (waited on for {timeout_s:g} s in all): cut off"
    return "harness disconnected" if gone else None


def read_upstream_key(spec: ModelSpec, environ: Mapping[str, str] | None = None) -> str | None:
    """The key from the worker's environment; a clear error (naming only the variable)."""
    if spec.api_key_env is None:
        return None
    env = os.environ if environ is None else environ
    key = env.get(spec.api_key_env)
    if not key:
        raise ModelError(f"model upstream key: environment variable {spec.api_key_env} is not set")
    return key
