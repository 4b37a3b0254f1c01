"""Runtime configs: a pydantic discriminated union on `type`.

Only pydantic here: specs (and through them workflows) import this module.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SubprocessConfig(_Config):
    """A local process group on the worker's machine."""

    type: Literal["subprocess"] = "subprocess"


class DockerMount(_Config):
    source: str
    target: str
    read_only: bool = True


class DockerConfig(_Config):
    """A long-lived container; every harness process is an exec inside it."""

    type: Literal["docker"] = "docker"
    image: str = "episodes-harness:latest"
    cpus: float = 1.0
    memory: str = "1g"
    pids_limit: int = 256
    env: dict[str, str] = Field(default_factory=dict)
    mounts: list[DockerMount] = Field(default_factory=list)
    # Containers get no network unless a spec opts in (e.g. "bridge").
    network: str = "none"
    workdir: str = "/work"
    # Harness processes run as this user ("uid:gid" or a name the image knows); the
    # default is the `episodes` user of scripts/build-image.sh's images. "root" opts out.
    user: str = "10001:10001"
    # The image's filesystem is read-only; `workdir` (a volume seeded from the image's
    # copy) and /tmp (a tmpfs) stay writable. False: the whole container is writable.
    read_only: bool = True


class ModalConfig(_Config):
    """A Modal sandbox; processes are `sandbox.exec` calls."""

    type: Literal["modal"] = "modal"
    image: str = "python:3.11-slim"
    app_name: str = "episodes"
    cpu: float = 1.0
    memory_mb: int = 1024
    timeout_s: int = 3600
    workdir: str = "/work"
    env: dict[str, str] = Field(default_factory=dict)


class PrimeConfig(_Config):
    """A Prime Intellect VM sandbox; processes via `AsyncSandboxClient.open_process`."""

    type: Literal["prime"] = "prime"
    docker_image: str = "python:3.11-slim"
    vm: bool = True
    cpu_cores: int = 1
    memory_gb: int = 2
    disk_size_gb: int = 10
    timeout_minutes: int = 60
    workdir: str = "/work"
    env: dict[str, str] = Field(default_factory=dict)


RuntimeConfig = Annotated[
    SubprocessConfig | DockerConfig | ModalConfig | PrimeConfig,
    Field(discriminator="type"),
]
