"""A Harbor task directory, read and checked: `task.toml` (Harbor's TaskConfig), its files.

    task-name/
      task.toml            [metadata] [verifier] [agent] [environment] [solution] [[steps]]
      instruction.md       the first message (single-step tasks)
      environment/         Dockerfile + build context (or [environment].docker_image)
      tests/test.sh        writes /logs/verifier/reward.txt (a number) or reward.json
      solution/solve.sh    the reference solution (the `oracle` harness runs it)
      steps/<name>/        multi-step tasks: instruction.md, tests/, solution/ per step

Every field of Harbor's schema is either mapped (docs/harbor.md has the table) or an
error naming it: a task is never run with part of its config silently dropped.
Standard library and pydantic only.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from episodes.errors import SpecError
from episodes.types.spec import describe_validation


class HarborTaskError(SpecError):
    """A Harbor task directory is invalid: one line naming the task and the field or file."""


class _Section(BaseModel):
    # Unknown keys are errors: a field we do not know is a field we would ignore.
    model_config = ConfigDict(extra="forbid")


class VerifierConfig(_Section):
    timeout_sec: float = Field(default=600.0, gt=0)
    """How long tests/test.sh may run (a box command timeout)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Variables test.sh runs with."""


class AgentConfig(_Section):
    timeout_sec: float | None = Field(default=600.0, gt=0)
    """The turn timeout of this task's (or step's) turns, at most the spec's."""
    user: str | None = None
    """The box user the harness (and every box command) runs as; default root."""


class EnvironmentConfig(_Section):
    build_timeout_sec: float = Field(default=600.0, gt=0)
    """How long `docker build` of environment/ may take."""
    docker_image: str | None = None
    """An image to use instead of building environment/ (local, or pulled once)."""
    cpus: float = Field(default=1.0, gt=0)
    memory_mb: int | None = Field(default=None, gt=0)
    memory: str | None = None
    """Harbor's older spelling of memory_mb: "2G", "512M"."""
    storage_mb: int | None = Field(default=None, gt=0)
    """Accepted, not enforced by the Docker runtime (listed as `not_enforced` in the score)."""
    storage: str | None = None
    gpus: int = Field(default=0, ge=0)
    allow_internet: bool = True
    """False: the box has no network (`none`); true: `bridge` (or the spec's network)."""
    workdir: str | None = None
    """The box's working directory; default the image's WORKDIR."""
    env: dict[str, str] = Field(default_factory=dict)
    """Variables of the box (every process in it)."""

    @field_validator("gpus")
    @classmethod
    def _no_gpus(cls, v: int) -> int:
        if v:
            raise ValueError("GPUs are not supported by the episodes Docker runtime")
        return v

    @property
    def memory_bytes_mb(self) -> int:
        if self.memory_mb is not None:
            return self.memory_mb
        if self.memory is not None:
            return _size_mb(self.memory, "environment.memory")
        return 2048


class SolutionConfig(_Section):
    env: dict[str, str] = Field(default_factory=dict)
    """Variables solve.sh runs with (the oracle harness)."""


class TaskInfo(BaseModel):
    """[task]: descriptive (name, description, authors, keywords, version); kept as is."""

    model_config = ConfigDict(extra="allow")


class StepConfig(_Section):
    name: str
    min_reward: float | dict[str, float] | None = None
    """Below it (or below any key's, for reward.json rewards) the episode ends here."""
    agent: AgentConfig | None = None
    verifier: VerifierConfig | None = None

    @field_validator("name")
    @classmethod
    def _plain(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", v):
            raise ValueError(f"step name {v!r} must be a plain directory name")
        return v


class TaskConfig(_Section):
    version: str | None = None
    schema_version: str | None = None
    source: str | None = None
    task: TaskInfo | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    verifier: VerifierConfig = Field(default_factory=VerifierConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    solution: SolutionConfig = Field(default_factory=SolutionConfig)
    steps: list[StepConfig] = Field(default_factory=list)
    multi_step_reward_strategy: Literal["mean", "final"] | None = None


@dataclass(frozen=True)
class Step:
    """One turn of a task: its instruction, tests, solution and limits."""

    name: str
    instruction: str
    tests: list[Path]  # copied to /tests in order (task-level first, the step's over it)
    solution: Path | None
    agent_timeout_s: float | None
    verifier: VerifierConfig
    min_reward: float | dict[str, float] | None = None


@dataclass(frozen=True)
class HarborTask:
    path: Path
    config: TaskConfig
    steps: list[Step] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def multi_step(self) -> bool:
        return bool(self.config.steps)

    @property
    def strategy(self) -> Literal["mean", "final"]:
        return self.config.multi_step_reward_strategy or "mean"

    def not_enforced(self) -> list[str]:
        """Fields given that the Docker runtime cannot enforce (reported, not dropped)."""
        env = self.config.environment
        return [f"environment.{k}" for k in ("storage_mb", "storage") if getattr(env, k)]


def load_task(path: Path) -> HarborTask:
    """Read and check one task directory; HarborTaskError names what is wrong."""
    path = path.resolve()
    where = f"harbor task {path.name} ({path})"
    toml = _inside(path / "task.toml", path, where)
    if not toml.is_file():
        raise HarborTaskError(f"{where}: task.toml is missing")
    try:
        raw = tomllib.loads(toml.read_text())
    except tomllib.TOMLDecodeError as e:
        raise HarborTaskError(f"{where}: task.toml is not TOML ({e})") from None
    try:
        config = TaskConfig.model_validate(raw)
        config.environment.memory_bytes_mb  # noqa: B018 - the size string, checked now
        if config.environment.storage:
            _size_mb(config.environment.storage, "environment.storage")
    except ValidationError as e:
        raise HarborTaskError(f"{where}: task.toml: {_describe(e)}") from None
    except ValueError as e:
        raise HarborTaskError(f"{where}: task.toml: {e}") from None
    env = config.environment
    for name in ("environment", "environment/Dockerfile", "instruction.md", "tests", "solution"):
        _inside(path / name, path, where)
    if env.docker_image is None and not (path / "environment" / "Dockerfile").is_file():
        raise HarborTaskError(
            f"{where}: environment/Dockerfile is missing (or set [environment].docker_image)"
        )
    if (path / "environment" / "docker-compose.yaml").exists():
        raise HarborTaskError(
            f"{where}: environment/docker-compose.yaml: multi-container tasks are not supported"
        )
    task_tests = path / "tests"
    steps: list[Step] = []
    if not config.steps:
        steps.append(
            Step(
                name=path.name,
                instruction=_read(path / "instruction.md", where),
                tests=[task_tests],
                solution=_maybe_dir(path / "solution"),
                agent_timeout_s=config.agent.timeout_sec,
                verifier=config.verifier,
            )
        )
        if config.multi_step_reward_strategy is not None:
            raise HarborTaskError(f"{where}: multi_step_reward_strategy needs [[steps]]")
    else:
        names = [s.name for s in config.steps]
        if len(set(names)) != len(names):
            raise HarborTaskError(f"{where}: [[steps]] names repeat: {names}")
        for s in config.steps:
            sdir = path / "steps" / s.name
            for sub in ("", "instruction.md", "tests", "solution"):
                _inside(sdir / sub if sub else sdir, path, where)
            if not sdir.is_dir():
                raise HarborTaskError(f"{where}: step {s.name!r}: steps/{s.name}/ is missing")
            agent = s.agent or config.agent
            steps.append(
                Step(
                    name=s.name,
                    instruction=_read(sdir / "instruction.md", where),
                    tests=[d for d in (task_tests, sdir / "tests") if d.is_dir()],
                    solution=_maybe_dir(sdir / "solution"),
                    agent_timeout_s=agent.timeout_sec,
                    verifier=s.verifier or config.verifier,
                    min_reward=s.min_reward,
                )
            )
    for step in steps:
        if not any((d / "test.sh").is_file() for d in step.tests):
            label = "tests/test.sh" if not config.steps else f"step {step.name!r}: test.sh"
            raise HarborTaskError(f"{where}: {label} is missing")
    return HarborTask(path=path, config=config, steps=steps)


def task_dirs(path: Path) -> list[Path]:
    """`path` itself if it is a task (has task.toml), else its task subdirectories."""
    if (path / "task.toml").is_file():
        return [path]
    if not path.is_dir():
        raise HarborTaskError(f"harbor: {path} is not a directory")
    found = sorted(p for p in path.iterdir() if (p / "task.toml").is_file())
    if not found:
        raise HarborTaskError(f"harbor: {path} holds no task directory (none has a task.toml)")
    return found


def _inside(path: Path, root: Path, where: str) -> Path:
    """`path`, once sure that it, its links followed, stays in the task directory `root`:
    task content is untrusted, and a `tests -> ~/.ssh` or `instruction.md ->
    /proc/self/environ` must not read the worker's files (links *inside* tests/ and
    solution/ are copied as links: `episodes.runtimes.box_copy`)."""
    try:
        real = path.resolve()
    except (OSError, RuntimeError) as e:  # a link loop
        raise HarborTaskError(f"{where}: {path.relative_to(root)}: {e}") from None
    if real != root and root not in real.parents:
        raise HarborTaskError(
            f"{where}: {path.relative_to(root)} is a link to {real}, outside the task "
            "directory; make it a file or directory of the task"
        )
    return path


def _read(path: Path, where: str) -> str:
    if not path.is_file():
        raise HarborTaskError(f"{where}: {path.relative_to(path.parents[1])} is missing")
    return path.read_text()


def _maybe_dir(path: Path) -> Path | None:
    return path if path.is_dir() else None


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)


def _size_mb(text: str, name: str) -> int:
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"{name}: {text!r} is not a size like '2G' or '512M'")
    factor = {"": 1 / 1024 / 1024, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
    return max(1, int(float(m.group(1)) * factor[m.group(2).upper()]))


def _describe(e: ValidationError) -> str:
    return describe_validation(
        e, unknown="not supported by episodes (remove it, or run the task elsewhere)"
    )
