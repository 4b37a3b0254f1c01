"""Runtime configs: a pydantic discriminated union on `type`.

Only pydantic here: specs (and through them workflows) import this module.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from episodes.types.base import Seconds


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


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
    cpus: float = 1.0
    """CPU limit of the container."""
    memory: str = "1g"
    """Memory limit of the container (Docker's notation: "512m", "2g")."""
    pids_limit: int = 256
    """The most processes the container may hold (a fork bomb stops there)."""
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
    Python of its own (episodes/runtimes/bundle.py). None (the default): every image
    but the project's own (scripts/build-image.sh's, and images FROM them, which
    carry its `episodes.harness.hash` label and their own Python); true: always;
    false: never."""
    capabilities: Literal["minimal", "default"] = "minimal"
    """`minimal`: every capability dropped but KILL (for the worker's control execs).
    `default`: the engine's default set, as `docker run` gives, for images whose own
    scripts need it (apt-get, chown): Harbor tasks' boxes."""


class ModalConfig(_Config):
    """A Modal sandbox; processes are `sandbox.exec` calls."""

    type: Literal["modal"] = "modal"
    image: str = "python:3.11-slim"
    """The sandbox's image (a registry name Modal pulls)."""
    app_name: str = "episodes"
    """The Modal app the sandboxes are created in."""
    cpu: float = 1.0
    """CPU cores of the sandbox."""
    memory_mb: int = 1024
    """Memory of the sandbox."""
    timeout_s: Seconds = 3600
    """Modal's own lifetime bound: a sandbox nobody stops is deleted after it."""
    workdir: str = "/work"
    """The working directory of every process in the sandbox."""
    env: dict[str, str] = Field(default_factory=dict)
    """Variables set in the sandbox (inline: never secrets)."""


class PrimeConfig(_Config):
    """A Prime Intellect VM sandbox; processes via `AsyncSandboxClient.open_process`."""

    type: Literal["prime"] = "prime"
    docker_image: str = "python:3.11-slim"
    """The VM's image (a registry name Prime pulls)."""
    vm: bool = True
    """A full VM (True) or a container sandbox."""
    cpu_cores: int = 1
    """CPU cores of the box."""
    memory_gb: int = 2
    """Memory of the box."""
    disk_size_gb: int = 10
    """Disk of the box."""
    timeout_minutes: int = 60
    """Prime's own lifetime bound: a box nobody stops is deleted after it."""
    workdir: str = "/work"
    """The working directory of every process in the box."""
    env: dict[str, str] = Field(default_factory=dict)
    """Variables set in the box (inline: never secrets)."""


RuntimeConfig = Annotated[
    SubprocessConfig | DockerConfig | ModalConfig | PrimeConfig,
    Field(discriminator="type"),
]
