"""Typed failures. Each harness failure carries the `error_type` the workflow reports."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from episodes.models import ErrorType


class EpisodesError(Exception):
    """Base for every error this package raises on purpose."""


class SpecError(EpisodesError):
    """A spec or config is invalid; the message names the field (and file)."""


class EnvironmentLoadError(SpecError):
    """An environment name or `module:Class` reference could not be loaded."""


class RuntimeUnavailable(EpisodesError):
    """A runtime cannot be used here (SDK missing, engine down, credentials absent)."""


class ImageMissing(RuntimeUnavailable):
    """The box image a spec names is not where this worker looks: maybe the host's
    build or pull is missing, maybe the spec's name is wrong (so no sign, alone, that
    the worker is broken: see episodes/breaker.py)."""


class HarnessFailure(EpisodesError):
    """The harness misbehaved. `error_type` names the outcome; `stderr_tail` helps debug it."""

    error_type: ErrorType = "harness_crashed"

    def __init__(self, message: str, *, stderr_tail: str = "", exit_code: int | None = None):
        self.stderr_tail = stderr_tail
        self.exit_code = exit_code
        self.detail = message
        full = message
        if exit_code is not None:
            full += f" (exit code {exit_code})"
        if stderr_tail:
            full += f"\n--- harness stderr (tail) ---\n{stderr_tail.rstrip()}"
        super().__init__(full)


class HarnessStartFailed(HarnessFailure):
    error_type = "harness_start_failed"


class HarnessCrashed(HarnessFailure):
    error_type = "harness_crashed"


class TurnTimeout(HarnessFailure):
    error_type = "turn_timeout"


class ProtocolError(HarnessFailure):
    """The byte stream broke the wire protocol (bad length, non-JSON, wrong turn...)."""

    error_type = "protocol_error"


class HarnessReportedError(HarnessFailure):
    """The harness answered a turn with an `error` packet; it is still alive."""

    error_type = "harness_error"
