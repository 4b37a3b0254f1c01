"""Runtime configs: a pydantic discriminated union on `type`.

Only pydantic here: specs (and through them workflows) import this module.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from episodes.types.base import Seconds

_UNITS = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


def _bytes(value: Any) -> Any:
    """Docker's notation ("512m", "2g"; binary units, "GiB"/"MB" spellings too) or a
    number of bytes."""
    if isinstance(value, str):
        m = _SIZE.match(value)
        if m is None:
            raise ValueError(f"{value!r} is not a size (write it as 512m, 2g or a byte count)")
        return int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    return value


Bytes = Annotated[int, BeforeValidator(_bytes), Field(gt=0)]
"""A size in bytes; specs may write "64m", "2g", "1GiB"."""


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Limits(_Config):
    """What one box may use, with the same names on every runtime (docs/containment.md
    says how each runtime enforces each). A box past one ends its episode
    `limit_exceeded`, naming the limit. The defaults bound a runaway harness; a spec
    raises them."""

    memory: Bytes = 2 * 2**30
    """Memory of the whole box (every process, and what it keeps in its tmpfs)."""
    processes: int = Field(default=512, gt=0)
    """The most processes (threads included) the box may hold: a fork bomb stops there."""
    disk: Bytes = 2 * 2**30
    """What the box may write: its workdir and /tmp together, and its /dev/shm (sized at a
    quarter of it in the sandbox, and counted with /tmp)."""
    cpus: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    """CPU cores' worth of time the box may use at once."""


def _lift(data: Any, aliases: dict[str, tuple[str, int]]) -> Any:
    """Moves a runtime's old spelling of a limit (Docker's `memory`, `pids_limit`,
    `cpus`; Modal's `memory_mb`...) into `limits`, scaled to its unit, so specs written
    before `limits` keep working."""
    if not isinstance(data, dict) or not any(k in data for k in aliases):
        return data
    data = dict(data)
    given = data.get("limits") or {}
    limits = dict(given) if isinstance(given, dict) else given.model_dump()
    for old, (new, scale) in aliases.items():
        if old in data:
            value = data.pop(old)
            limits.setdefault(new, value * scale if scale != 1 and _number(value) else value)
    data["limits"] = limits
    return data


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class SubprocessConfig(_Config):
    """Processes on the worker's machine: in a bubblewrap sandbox (the default), or, for
    trusted harnesses only, as plain processes of the worker (`isolation: none`).

    One runtime type with an `isolation` switch rather than a second type: both run the
    worker's own Python (`{python}`) on the worker's machine and take the same spec; a
    spec that trusts its harness opts out with one line, not a different runtime.
    """

    type: Literal["subprocess"] = "subprocess"
    isolation: Literal["sandbox", "none"] = "sandbox"
    """`sandbox`: each box is a bubblewrap sandbox (docs/containment.md): its own user,
    pid and network namespaces (only its own loopback), the system read-only, a private
    workdir and /tmp, no worker files but the Python it runs and the `episodes` package,
    killed as a unit. The worker needs `bwrap` (apt-get install bubblewrap).
    `none`: a process group of the worker's user in the worker's namespaces: it can read
    the worker's environment and files, other sessions' processes, and reach the
    Temporal frontend. For trusted harnesses only (a spec with `model` or `secrets` and
    `none` is warned about)."""
    ro_paths: list[str] = Field(default_factory=list)
    """Absolute host paths (files or directories) bound read-only into a sandbox at the
    same path: what the harness needs of the worker's files. The harness command's own
    files (absolute paths in `command` naming existing files) are added by the worker.
    Ignored with `isolation: none`, which sees every file anyway."""
    limits: Limits = Field(default_factory=Limits)
    """What the box may use. The sandbox enforces them with a cgroup where the worker
    can make one, else with rlimits and sized tmpfs mounts (docs/containment.md);
    `isolation: none` enforces none of them."""

    @field_validator("ro_paths")
    @classmethod
    def _absolute(cls, v: list[str]) -> list[str]:
        for path in v:
            if not path.startswith("/"):
                raise ValueError(f"{path!r} is not an absolute path")
        return v


class DockerMount(_Config):
    source: str
    """A host path (or volume name)."""
    target: str
    """Where it appears in the container."""
    read_only: bool = True
    """Mounted read-only unless False."""


class DockerConfig(_Config):
    """A long-lived container; every harness process is an exec inside it."""

    type: Literal["docker"] = "docker"
    image: str = "episodes-harness:latest"
    """A local image (built by scripts/build-image.sh by default; no registry is
    pulled from)."""
    limits: Limits = Field(default_factory=Limits)
    """What the container may use: memory and processes by the engine's cgroup, CPU by
    its quota, disk by the size of its /tmp tmpfs (the workdir volume is not sized).
    `memory`, `pids_limit` and `cpus` at this level are the old spellings."""
    env: dict[str, str] = Field(default_factory=dict)
    """Variables set in the container (inline: never secrets)."""
    mounts: list[DockerMount] = Field(default_factory=list)
    """Host paths mounted into the container."""
    network: str = "none"
    """Containers get no network unless a spec opts in (e.g. "bridge")."""
    workdir: str = "/work"
    """The working directory of every process in the container."""
    user: str = "10001:10001"
    """Harness processes run as this user ("uid:gid" or a name the image knows); the
    default is the `episodes` user of scripts/build-image.sh's images. "root" opts
    out."""
    read_only: bool = True
    """The image's filesystem is read-only; `workdir` (a volume seeded from the
    image's copy) and /tmp (a tmpfs) stay writable. False: the whole container is
    writable."""
    runtime_bundle: bool | None = None
    """Mount the runtime bundle (a Python with its own loader and libraries, and this
    package's in-box programs) read-only at /opt/episodes-runtime: the relay, the
    tunnel end and `{python}` harnesses then run in any image, with or without a
    Python of its own (episodes/runtimes/docker/bundle.py). None (the default): every image
    but the project's own (scripts/build-image.sh's, and images FROM them, which
    carry its `episodes.harness.hash` label and their own Python); true: always;
    false: never."""
    capabilities: Literal["minimal", "default"] = "minimal"
    """`minimal`: every capability dropped but KILL (for the worker's control execs).
    `default`: the engine's default set, as `docker run` gives, for images whose own
    scripts need it (apt-get, chown): Harbor tasks' boxes."""

    @model_validator(mode="before")
    @classmethod
    def _old_spellings(cls, data: Any) -> Any:
        return _lift(
            data, {"memory": ("memory", 1), "pids_limit": ("processes", 1), "cpus": ("cpus", 1)}
        )

    @property
    def memory(self) -> int:
        """Old spelling of `limits.memory` (bytes)."""
        return self.limits.memory

    @property
    def pids_limit(self) -> int:
        """Old spelling of `limits.processes`."""
        return self.limits.processes

    @property
    def cpus(self) -> float:
        """Old spelling of `limits.cpus`."""
        return self.limits.cpus


class ModalConfig(_Config):
    """A Modal sandbox; processes are `sandbox.exec` calls."""

    type: Literal["modal"] = "modal"
    image: str = "python:3.11-slim"
    """The sandbox's image (a registry name Modal pulls)."""
    app_name: str = "episodes"
    """The Modal app the sandboxes are created in."""
    limits: Limits = Field(default_factory=Limits)
    """Memory and CPU are the sandbox's (Modal enforces them); disk and processes are
    not bounded by this runtime. `cpu` and `memory_mb` are the old spellings."""
    timeout_s: Seconds = 3600
    """Modal's own lifetime bound: a sandbox nobody stops is deleted after it."""
    workdir: str = "/work"
    """The working directory of every process in the sandbox."""
    env: dict[str, str] = Field(default_factory=dict)
    """Variables set in the sandbox (inline: never secrets)."""

    @model_validator(mode="before")
    @classmethod
    def _old_spellings(cls, data: Any) -> Any:
        return _lift(data, {"cpu": ("cpus", 1), "memory_mb": ("memory", 2**20)})

    @property
    def cpu(self) -> float:
        return self.limits.cpus

    @property
    def memory_mb(self) -> int:
        return -(-self.limits.memory // 2**20)


class PrimeConfig(_Config):
    """A Prime Intellect VM sandbox; processes via `AsyncSandboxClient.open_process`."""

    type: Literal["prime"] = "prime"
    docker_image: str = "python:3.11-slim"
    """The VM's image (a registry name Prime pulls)."""
    vm: bool = True
    """A full VM (True) or a container sandbox."""
    limits: Limits = Field(default_factory=Limits)
    """Memory, CPU and disk are the VM's, rounded up to whole GiB and cores (Prime
    enforces them); processes are not bounded by this runtime. `cpu_cores`,
    `memory_gb` and `disk_size_gb` are the old spellings."""
    timeout_minutes: int = 60
    """Prime's own lifetime bound: a box nobody stops is deleted after it."""
    workdir: str = "/work"
    """The working directory of every process in the box."""
    env: dict[str, str] = Field(default_factory=dict)
    """Variables set in the box (inline: never secrets)."""

    @model_validator(mode="before")
    @classmethod
    def _old_spellings(cls, data: Any) -> Any:
        return _lift(
            data,
            {
                "cpu_cores": ("cpus", 1),
                "memory_gb": ("memory", 2**30),
                "disk_size_gb": ("disk", 2**30),
            },
        )

    @property
    def cpu_cores(self) -> int:
        return max(1, -(-int(self.limits.cpus * 1000) // 1000))

    @property
    def memory_gb(self) -> int:
        return -(-self.limits.memory // 2**30)

    @property
    def disk_size_gb(self) -> int:
        return -(-self.limits.disk // 2**30)


class E2BConfig(_Config):
    """An E2B sandbox (a Firecracker microVM); processes are envd commands."""

    type: Literal["e2b"] = "e2b"
    template: str = "base"
    """The sandbox template (a name or id); its build fixes the sandbox's CPU and memory."""
    limits: Limits = Field(default_factory=Limits)
    """Not enforced by this runtime: E2B sizes a sandbox by its template (`e2b template
    build --cpu-count --memory-mb`), not per sandbox; build the template to fit."""
    timeout_s: Seconds = 3600
    """E2B's own lifetime bound: a sandbox nobody stops is killed after it (at most 1 h
    on E2B's Hobby tier, 24 h on Pro)."""
    workdir: str = "/home/user"
    """The working directory of every process (made at start if missing); the default is
    the home of the template's `user`, who runs the processes."""
    python: str = "python3"
    """The box's Python. Each process runs under a small stdlib bridge on it: E2B hands
    command output to the SDK as decoded text, so the bridge carries the bytes
    base64-encoded (the harness protocol is binary)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Variables set in the sandbox (inline: never secrets)."""


RuntimeConfig = Annotated[
    SubprocessConfig | DockerConfig | ModalConfig | PrimeConfig | E2BConfig,
    Field(discriminator="type"),
]

# The runtime types, in the union's order: a runtime's name wherever one is named (a
# worker's `box_caps`, `EpisodeResult.runtime`, `prices.box_second`).
RUNTIME_TYPES: tuple[str, ...] = ("subprocess", "docker", "modal", "prime", "e2b")


def named_runtime(value: Any) -> Any:
    """A runtime named by its type alone (`docker`) as its config with every default
    (`{type: docker}`); anything else as it is."""
    if isinstance(value, str):
        if value not in RUNTIME_TYPES:
            raise ValueError(f"{value!r} is not a runtime (one of {', '.join(RUNTIME_TYPES)})")
        return {"type": value}
    return value


class BoxCap(_Config):
    """A worker's cap on one runtime's boxes (its `box_caps` setting): how many may be
    starting at once and how many it may hold at once (starting ones included); None:
    no cap. Past either, a provision waits for room (docs/runtimes.md, "Caps")."""

    starting: int | None = Field(default=None, ge=1)
    running: int | None = Field(default=None, ge=1)


# The caps a worker has unless its `box_caps` says otherwise for that runtime: Modal
# fails boxes past ~128 starting at once ("Runtime did not start within 299s";
# verl-project/uni-agent #47 capped STARTING at 128). The others are bounded by the
# worker's `max_sessions` alone.
DEFAULT_BOX_CAPS: dict[str, BoxCap] = {"modal": BoxCap(starting=128)}


def parse_box_caps(value: Any) -> Any:
    """`box_caps` from its one-line form, `modal.starting=64,docker.running=32` (a value
    `none` lifts that cap), as the environment and the command line give it; a mapping
    (a config file's table) as it is. Each runtime named must be one."""
    if isinstance(value, str):
        caps: dict[str, dict[str, int | None]] = {}
        for item in filter(None, (p.strip() for p in value.split(","))):
            key, eq, number = item.partition("=")
            runtime, dot, kind = key.strip().partition(".")
            if not eq or not dot or kind not in ("starting", "running"):
                raise ValueError(
                    f"{item!r}: write a cap as RUNTIME.starting=N or RUNTIME.running=N"
                )
            raw = number.strip().lower()
            if raw != "none" and not raw.isdigit():
                raise ValueError(f"{item!r}: a cap is a whole number (or none)")
            caps.setdefault(runtime, {})[kind] = None if raw == "none" else int(raw)
        value = caps
    if isinstance(value, dict):
        for runtime in value:
            if runtime not in RUNTIME_TYPES:
                raise ValueError(
                    f"box_caps: {runtime!r} is not a runtime (one of {', '.join(RUNTIME_TYPES)})"
                )
    return value
