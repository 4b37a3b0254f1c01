"""Worker logs: text or one JSON object a line, each carrying the episode it is about.

Activities bind the workflow id, session id and turn in context variables
(`bind`); every record logged while they run, by them or by the session and its
harness driver (tasks copy the context they were started in), carries them. Outside
an activity the fields are null.
"""

from __future__ import annotations

import contextvars
import datetime
import json
import logging
import sys
from typing import Any

WORKFLOW_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "workflow_id", default=None
)
SESSION_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("session_id", default=None)
TURN: contextvars.ContextVar[int | None] = contextvars.ContextVar("turn", default=None)

FIELDS = ("workflow_id", "session_id", "turn")


def bind(
    *, workflow_id: str | None = None, session_id: str | None = None, turn: int | None = None
) -> None:
    """Set what the current task's log lines are about (None leaves a field as it is)."""
    if workflow_id is not None:
        WORKFLOW_ID.set(workflow_id)
    if session_id is not None:
        SESSION_ID.set(session_id)
    if turn is not None:
        TURN.set(turn)


class ContextFilter(logging.Filter):
    """Put the bound ids on every record (the activity's workflow id as a fallback)."""

    def filter(self, record: logging.LogRecord) -> bool:
        workflow_id = WORKFLOW_ID.get()
        if workflow_id is None:
            workflow_id = _activity_workflow_id()
        record.workflow_id = workflow_id
        record.session_id = SESSION_ID.get()
        record.turn = TURN.get()
        return True


def _activity_workflow_id() -> str | None:
    from temporalio import activity

    if activity.in_activity():
        return activity.info().workflow_id
    return None


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in FIELDS:
            out[name] = getattr(record, name, None)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


TEXT_FORMAT = (
    "%(asctime)s %(levelname)s %(name)s [%(workflow_id)s %(session_id)s #%(turn)s] %(message)s"
)


def configure_logging(level: str = "INFO", fmt: str = "text") -> logging.Handler:
    """One stderr handler on the root logger, replacing what was there."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    return handler
