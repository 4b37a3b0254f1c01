"""The harness part of a spec: the agent program, its secrets, where it runs and what it
may stream (`EpisodeSpec.harness`).

Only pydantic/stdlib at import time: workflows import these models through the spec.
"""

from __future__ import annotations

import re
import shlex
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from episodes.types.base import Model, Seconds
from episodes.types.runtime import (
    RUNTIME_TYPES,
    RuntimeConfig,
    SubprocessConfig,
    named_runtime,
)
from episodes.types.tuning import DEFAULT_MAX_PACKET_BYTES


class AcpAllowList(Model):
    """Allow only these tools: an entry matches a tool call's `title` or its `kind`
    (ACP tool calls carry no separate name; agents usually put it in the title)."""

    allow: list[str]


# How an ACP agent's `session/request_permission` is answered: "allow" picks the agent's
# allow option (allow_once before allow_always), "deny" its reject option (reject_once
# first); with no such option the request is answered `cancelled`. The default, "deny",
# keeps an agent from doing what nobody asked for.
AcpPermissions = Literal["allow", "deny"] | AcpAllowList


class EnvSecret(Model):
    """A secret read from the worker's environment variable `env` when the session starts."""

    env: Annotated[str, Field(min_length=1)]


class FileSecret(Model):
    """A secret read from the worker's file `file` (one trailing newline dropped)."""

    file: Annotated[str, Field(min_length=1)]


def _secret_kind(value: Any) -> str | None:
    if isinstance(value, dict):
        return "env" if "env" in value else "file" if "file" in value else None
    if isinstance(value, BaseModel):
        return "env" if isinstance(value, EnvSecret) else "file"
    return None


# `{env: HOST_VAR}` or `{file: PATH}`, told apart by the key (a discriminated union).
SecretRef = Annotated[
    Annotated[EnvSecret, Tag("env")] | Annotated[FileSecret, Tag("file")],
    Discriminator(
        _secret_kind,
        custom_error_type="secret_ref",
        custom_error_message="a secret is {env: HOST_VARIABLE} or {file: PATH}",
    ),
]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MIB = 1024 * 1024


class HarnessLimits(Model):
    """What a harness may stream, per turn and between turns. Past a budget the turn
    ends `protocol_error` (the error names the field to raise) and the harness is
    stopped: what it streams is held in the worker's memory until the turn is recorded,
    so without a bound one harness could exhaust the worker that runs many."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    turn_events: int = Field(default=100_000, ge=1)
    """Events one turn may stream: the harness's own (ACP: every message the agent
    sends), and the tool and model calls it makes."""
    turn_bytes: int = Field(default=64 * _MIB, ge=1024)
    """Bytes those events may add up to in one turn (as sent on the wire; a call as
    recorded, its request and response included)."""
    between_turns_events: int = Field(default=10_000, ge=1)
    """Events between two turns (or before the first): an ACP agent's updates, tool
    and model calls made while no turn runs. They wait in memory for the next turn."""
    between_turns_bytes: int = Field(default=16 * _MIB, ge=1024)
    """Bytes those events may add up to between two turns."""
    connections: int = Field(default=64, ge=1)
    """Connections the harness may hold open at once to each of the session's endpoints
    (the model proxy, the tool bridge, and the stdio tunnel of a box on another machine
    such as Modal or Prime); more are refused (HTTP 429 or 503, or closed)."""
    request_bytes: int = Field(default=128 * _MIB, ge=_MIB)
    """Bytes of request bodies the session's model proxy holds at once, over all its
    connections (one request's body is also at most 64 MiB): past it a request is
    refused with 429 before its body is read on."""
    turn_request_bytes: int = Field(default=1024 * _MIB, ge=_MIB)
    """Bytes of request bodies the harness may send the model proxy in one turn (and
    between two turns): past it each request is refused with 429 (413 if its own
    Content-Length says so) before its body is read. A model call resends the whole
    conversation, so this is well above `turn_bytes`, which counts what is recorded."""
    idle_timeout_s: Seconds = 60.0
    """An endpoint's connection on which no request arrives for this long is closed
    (the harness's HTTP client opens a new one when it needs it)."""
    request_timeout_s: Seconds = 60.0
    """How long a request's head and body may take to arrive; past it the request is
    answered 408 and its connection closed (a slow sender holds nothing for long)."""


class HarnessSpec(Model):
    """The agent program and where it runs."""

    command: list[str]
    """Argv; a string is split like a shell would. `{python}` is the runtime's Python
    (the worker's interpreter for subprocess, `python3` inside a box); in a spec file,
    `{spec_dir}` is the spec file's folder (`node {spec_dir}/harness.mjs`)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Variables set for the harness (inline: never secrets; see `secrets`)."""
    inherit_env: list[str] = Field(default_factory=list)
    """Host variables passed through by name. Nothing else from the host leaks in."""
    secrets: dict[str, SecretRef] = Field(default_factory=dict)
    """Variables the harness gets whose values are secrets: only the reference
    travels (workflow inputs, history); the worker reads the value when the
    session starts, and scrubs it (as ***) from everything the episode records."""
    cwd: str | None = None
    """The harness's working directory in its box (None: the box's own)."""
    runtime: RuntimeConfig = Field(default_factory=SubprocessConfig)
    """Where the harness runs (a discriminated union on `type`: subprocess, docker,
    modal, prime, e2b; docs/runtimes.md); a bare name (`docker`) is that runtime with
    its defaults. A list (`[docker, modal]`) names runtimes in order of preference: the
    first is this field, the others go to `spillover`."""
    spillover: list[RuntimeConfig] = Field(default_factory=list)
    """Where the harness runs when `runtime` has no room on the worker (its cap is
    full, or the cloud refused the box as too many), in order: the episode runs on the
    first with room and its result's `runtime` says which (docs/runtimes.md,
    "Spillover"). Usually written as `runtime: [first, then, ...]`."""
    ready_timeout_s: Seconds = 30.0
    """How long the harness has to say `ready` after it starts; past it the episode
    ends `harness_start_failed`."""
    stop_timeout_s: Seconds = 5.0
    """How long a stopping harness has to exit after `shutdown` before it is killed."""
    max_packet_bytes: int = Field(default=DEFAULT_MAX_PACKET_BYTES, gt=0)
    """The largest wire-protocol packet the harness may send; a larger one is a
    `protocol_error`."""
    protocol: Literal["native", "acp"] = "native"
    """`native`: the framed protocol of docs/protocol.md. `acp`: any Agent Client
    Protocol agent over stdio (docs/acp.md): session/new once, session/prompt per
    turn."""
    permissions: AcpPermissions = "deny"
    """ACP only: the answer to the agent's permission requests."""
    limits: HarnessLimits = Field(default_factory=HarnessLimits)
    """Budgets on what the harness streams (see HarnessLimits)."""

    @model_validator(mode="before")
    @classmethod
    def _runtime_list(cls, data: Any) -> Any:
        """`runtime: [a, b, ...]` as `runtime: a` and `spillover: [b, ...]`; bare names
        as their configs. Each entry is checked here, so an error names its place
        (`runtime[1]`)."""
        if not isinstance(data, dict):
            return data
        runtime = data.get("runtime")
        if isinstance(runtime, str):
            return {**data, "runtime": named_runtime(runtime)}
        if not isinstance(runtime, list | tuple):
            return data
        if not runtime:
            raise ValueError("runtime: an empty list names no runtime")
        if data.get("spillover"):
            raise ValueError("runtime is a list and spillover is set: write the list only")
        configs = []
        for i, entry in enumerate(runtime):
            try:
                configs.append(_RUNTIME.validate_python(named_runtime(entry)))
            except ValueError as e:  # pydantic's ValidationError is one
                raise ValueError(f"runtime[{i}]: {_first_error(e)}") from None
        return {**data, "runtime": configs[0], "spillover": configs[1:]}

    @property
    def runtimes(self) -> list[RuntimeConfig]:
        """Every runtime the spec names, in order: `runtime`, then `spillover`."""
        return [self.runtime, *self.spillover]

    @field_validator("command", mode="before")
    @classmethod
    def _split(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = shlex.split(v)
        if isinstance(v, list) and not v:
            raise ValueError("command must not be empty")
        return v

    @field_validator("secrets")
    @classmethod
    def _secret_names(cls, v: dict[str, Any]) -> dict[str, Any]:
        for name in v:
            if not _ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not an environment variable name")
        return v

    @model_validator(mode="after")
    def _secrets_apart(self) -> HarnessSpec:
        both = sorted(set(self.secrets) & set(self.env))
        if both:
            raise ValueError(f"{', '.join(both)}: set in both env and secrets; keep only secrets")
        return self


_RUNTIME: TypeAdapter[RuntimeConfig] = TypeAdapter(RuntimeConfig)


def _first_error(e: ValueError) -> str:
    """A runtime entry's first problem, on one line: where in the entry, and what."""
    if isinstance(e, ValidationError):
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"] if p not in RUNTIME_TYPES)
        msg = err["msg"].removeprefix("Value error, ")
        return f"{where}: {msg}" if where else msg
    return str(e).splitlines()[0]


# Harnesses named by a bare word (`harness: oracle`), stdlib-only programs run with the
# box's Python: `{python}`/`{episodes}` are resolved for the runtime (a Docker box with
# the runtime bundle has both whatever its image; episodes/runtimes/docker/bundle.py).
BUILTIN_HARNESSES: dict[str, list[str]] = {
    "oracle": ["{python}", "-I", "{episodes}/episodes/harness/reference/oracle.py"],
    "nop": ["{python}", "-I", "{episodes}/episodes/harness/reference/nop.py"],
}
