"""Every error this package raises on purpose, in one place: `EpisodesError` and its kin.

Standard library only: any layer may import it, the workflow sandbox included. Each
harness failure carries the `error_type` (a termination) the workflow reports.
"""

from __future__ import annotations

import traceback
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from episodes.types.results import ErrorType

# How much of an environment's traceback an `env_error` keeps.
ENV_TRACEBACK_CHARS = 4000


class EpisodesError(Exception):
    """Base for every error this package raises on purpose."""


# -- specs and configuration ------------------------------------------------------------


class SpecError(EpisodesError):
    """A spec or config is invalid; the message names the field (and file)."""


class EnvironmentLoadError(SpecError):
    """An environment name or `module:Class` reference could not be loaded."""


class SecretMissing(SpecError):
    """A secret the spec names is not on this worker (one line: the name and the source)."""


class TunnelFailed(SpecError):
    """The in-box end did not start: the box's image lacks what it needs (`python3`).
    A spec error, not retried: another attempt on the same image fails the same way."""


class GroupTooBig(SpecError):
    """Group execution: a group's members' turns outgrow the one payload that records
    them (`activities.group_record`); the message says what to run instead."""


class ConfigError(EpisodesError):
    """A setting is invalid; the message names it and its source."""


class PayloadsConfigError(SpecError):
    """A payloads setting is invalid; the message names the field, variable or file."""


# -- runtimes ---------------------------------------------------------------------------


class RuntimeUnavailable(EpisodesError):
    """A runtime cannot be used here (SDK missing, engine down, credentials absent)."""


class SandboxUnavailable(RuntimeUnavailable):
    """A worker cannot make sandboxes (its default runtime): said once at its start."""


class ImageMissing(RuntimeUnavailable):
    """The box image a spec names is not where this worker looks: maybe the host's
    build or pull is missing, maybe the spec's name is wrong (so no sign, alone, that
    the worker is broken: see episodes/breaker.py)."""


class BoxCapacity(EpisodesError):
    """The runtime refused a box as one too many (E2B's 429, Modal's limit on starting
    sandboxes): no fault of the spec or the worker. A spec with spillover runtimes tries
    the next (`episodes.runtimes.caps.is_capacity_error` also reads the SDKs' own)."""


class PoolClosed(EpisodesError):
    """A lease was requested from a pool that is closed."""


# -- harnesses (each a named termination) ------------------------------------------------


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
            # The first line is what summaries show: quote the stderr line that most
            # often names the cause (`ModuleNotFoundError: ...`, `nodee: not found`).
            last = last_line(stderr_tail)
            if last:
                full += f": {last}"
            full += f"\n--- harness stderr (tail) ---\n{stderr_tail.rstrip()}"
        super().__init__(full)


def last_line(text: str, limit: int = 200) -> str:
    """The last non-blank line of `text`, stripped and cut to `limit` characters."""
    for line in reversed(text.splitlines()):
        if line.strip():
            line = line.strip()
            return line if len(line) <= limit else line[: limit - 3] + "..."
    return ""


class HarnessStartFailed(HarnessFailure):
    error_type = "harness_start_failed"


class HarnessCrashed(HarnessFailure):
    error_type = "harness_crashed"


class TurnTimeout(HarnessFailure):
    error_type = "turn_timeout"


class ProtocolError(HarnessFailure):
    """The byte stream broke the wire protocol (bad length, non-JSON, wrong turn...)."""

    error_type = "protocol_error"


class LimitExceeded(HarnessFailure):
    """The box went past one of its limits (memory, processes, disk); the message names
    it. The agent's doing: the box is ended, the worker and other sessions go on."""

    error_type = "limit_exceeded"


class BoxLost(HarnessFailure):
    """The box died under the episode for a reason that is not the harness's doing: the
    container was removed or stopped from outside, its engine or VM is gone. An
    infrastructure fault: the episode goes on in a fresh box by exact replay (a box
    failover, `max_box_failovers`); past them it ends `box_lost`."""

    error_type = "box_lost"


class HarnessReportedError(HarnessFailure):
    """The harness answered a turn with an `error` packet; it is still alive."""

    error_type = "harness_error"


# -- sessions, environments and models ----------------------------------------------------


class TurnOutOfOrder(EpisodesError):
    """A turn index other than the next one (or a recorded one) was asked for."""


class EnvironmentFailed(EpisodesError):
    """The environment's own code raised (reset, step, score): the episode ends `env_error`."""

    error_type = "env_error"

    def __init__(self, method: str, e: BaseException) -> None:
        tail = "".join(traceback.format_exception(e))[-ENV_TRACEBACK_CHARS:]
        super().__init__(
            f"environment {method}() raised {type(e).__name__}: {e}\n"
            f"--- environment traceback (tail) ---\n{tail.rstrip()}"
        )


class BoxGone(EpisodesError):
    """The episode's box no longer exists (stopped, killed, or never given to this env:
    a score run away from its session after the worker was lost)."""


class ModelError(EpisodesError):
    """A model call failed for good (retries exhausted, or the upstream stream broke).

    The message is one line and never contains the upstream key: the session turns
    it into the episode's `error` with termination `model_error`.
    """


# -- the client and the server ------------------------------------------------------------


class EpisodeFailed(EpisodesError):
    """The workflow itself failed (a bug or a bad spec), so there is no EpisodeResult.
    `provision_failed`: its `provision` failed after Temporal's retries for a reason
    that is not the harness's (the batch runner may retry the episode). `config_error`:
    it failed with a spec error (a worker from before they were the episode's outcome):
    never retried."""

    def __init__(
        self,
        workflow_id: str,
        detail: str,
        *,
        provision_failed: bool = False,
        config_error: bool = False,
    ) -> None:
        self.workflow_id = workflow_id
        self.detail = detail
        self.provision_failed = provision_failed and not config_error
        self.config_error = config_error
        super().__init__(f"episode {workflow_id} failed: {detail}")


class StepRejected(EpisodesError):
    """The session refused a step: out of order, one already running, or the episode is over."""


class SessionFailed(EpisodesError):
    """The session's workflow failed (a bug or a bad spec), so there is no reply or result."""


class Interrupted(EpisodesError):
    """The user interrupted a command (Ctrl-C); the message says what was cancelled."""

    exit_code = 130


class ServerUnreachable(EpisodesError):
    """The Temporal frontend did not answer in time."""


class DevServerError(EpisodesError):
    """The embedded Temporal dev server could not be found or started."""


class ScheduleError(EpisodesError):
    """A schedule could not be made, read or changed (the message says which)."""


# -- payloads ---------------------------------------------------------------------------------


class PayloadKeyError(EpisodesError):
    """A payload names a key id that is not configured (or the keys are unusable)."""


class PayloadDecryptError(EpisodesError):
    """A payload could not be decrypted: the wrong key under its id, or corrupt data."""


class CodecServerError(EpisodesError):
    """The codec server could not start or answer."""


class LocalPayloadMissing(EpisodesError):
    """A history refers to a stored payload that is not (or no longer) in the directory."""
