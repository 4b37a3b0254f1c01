"""Episode and batch specs: what to run, where, and how often.

Loaded from YAML or JSON. Unknown fields are errors, and every validation error
names the field and the file. Only pydantic/stdlib at import time: workflows
import these models.
"""

from __future__ import annotations

import difflib
import json
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from episodes.errors import SpecError
from episodes.types.base import Model, Seconds
from episodes.types.cost import Prices
from episodes.types.harness import BUILTIN_HARNESSES, HarnessSpec
from episodes.types.model import ModelSpec
from episodes.types.priority import BatchBudget
from episodes.types.results import Task
from episodes.types.runtime import SubprocessConfig

# Under a protobuf Duration's ~3.2e11 s, with room for the score and the rest.
MAX_DRIVE_S = 1e11


# Names under which a value written inline in `harness.env` is probably a secret.
_SECRET_LOOKING = re.compile(r"(_KEY|_TOKEN|_SECRET)$|PASSWORD", re.IGNORECASE)


Execution = Literal["episode", "group"]
"""How `run_batch(groups=True)` runs a group: one EpisodeWorkflow per member
("episode", the default) or one EpisodeGroupWorkflow per group ("group", opt-in)."""


class SpecWarning(UserWarning):
    """Something in a spec works but is unwise (an inline secret)."""


# What a Harbor task's box starts from when the spec names no Docker runtime of its
# own; the env sets the image, limits, workdir and user per task (docs/harbor.md).
HARBOR_RUNTIME = {
    "type": "docker",
    "runtime_bundle": True,
    "read_only": False,
    "capabilities": "default",
    "user": "0:0",
}
# Harbor's agent and verifier timeouts default to 600 s each; a turn holds both.
HARBOR_TIMEOUT_S = 3600.0


class PoolSpec(Model):
    """Box reuse across episodes on one worker (docs/runtimes.md, the pool)."""

    model_config = ConfigDict(extra="forbid", frozen=True)  # hashable: one pool per setting

    ttl_s: Seconds = 600.0
    """How long a parked box waits for its next lease before it is stopped."""
    max_idle: int = Field(default=16, ge=0)
    """The most boxes parked at once per pool on a worker (0: none are kept)."""
    warm: int = Field(default=0, ge=0)
    """Boxes of the spec's runtime config a worker keeps started and unused, ahead of
    demand: a provision claims one instead of starting a box, and the worker starts
    another behind it (docs/runtimes.md, warm pools). A claimed box is fresh, never
    another episode's. Filled from a worker's first provision of the config; a config
    nobody claimed for `ttl_s` is given back. 0: none."""


class EpisodeSpec(Model):
    """A batch of episodes: every task x `samples`."""

    name: str
    """The spec's name: the default batch id, and `EpisodeSpec` in search attributes."""
    env: str
    """The environment: a built-in name (`guess-number`, `kv-store`, `harbor`, ...)
    or `module:Class`."""
    env_args: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments of the environment's constructor."""
    tasks: list[Task] | None = None
    """The tasks inline (or `dataset`, or `harbor`)."""
    dataset: Path | None = None
    """A JSONL file of tasks (`{"id": ..., "data": {...}}` per line), relative to the
    spec file."""
    harbor: Path | None = None
    """A Harbor task directory, or a directory of them (docs/harbor.md): each is a
    task (id: its folder name) of the `harbor` env, which `env` then defaults to."""
    harbor_retries: int = Field(default=0, ge=0)
    """Harbor single-step tasks: after failed tests, the agent gets their output and
    another turn, this many times."""
    samples: int = Field(default=1, ge=1)
    """Episodes per task (pass@k over them)."""
    harness: HarnessSpec
    """The agent program and where it runs."""
    max_turns: int = Field(default=20, ge=1)
    """The most turns an episode takes; reaching it ends the episode `max_turns`."""
    turn_mode: Literal["drive", "activity"] = "drive"
    """`drive`: one activity on the session's worker runs the turn loop and records
    the turns in batches (the fast default). `activity`: one `turn` activity per
    turn, scheduled by the workflow (each turn durable before the next starts;
    docs/concepts.md)."""
    turn_timeout_s: Seconds = 60.0
    """How long one turn may take, from the message sent to the reply; past it the
    episode ends `turn_timeout`."""
    on_worker_lost: Literal["fail", "restart"] = "fail"
    """`fail`: a lost worker ends the episode `worker_lost`. `restart`: a new session
    on a live worker replays the recorded turns and the episode goes on
    (docs/failures.md: Failure semantics), at most `max_restarts` times per
    episode."""
    on_divergence: Literal["live", "fail"] = "live"
    """A restart's (or a fork's) exact replay answers the harness's model and tool calls
    from the record (docs/failures.md: Exact replay); a call that does not match it is
    a divergence. `live`: counted, and every call from there on goes live. `fail`: the
    restore fails like a harness that could not start (`harness_start_failed`)."""
    max_parked_s: Seconds = Field(default=86400.0, gt=0)
    """A parked episode or interactive session (`EpisodesClient.park`) holds no box and
    no harness; past this long parked it resumes by itself (docs/trainers.md: Park and
    resume)."""
    max_restarts: int = Field(default=2, ge=0)
    """With `on_worker_lost: restart`: the most restarts per episode; past them it
    ends `worker_lost`."""
    max_box_failovers: int = Field(default=2, ge=0)
    """The most box failovers per episode: the box died under a turn for a reason that
    is not the harness's (the container removed or stopped from outside, its engine or
    VM gone), and the episode goes on in a fresh box by exact replay, as a restart
    does (docs/failures.md). Past them it ends `box_lost`. 0: the first loss ends it."""
    batch_retries: int = Field(default=1, ge=0)
    """Batches (`episodes run`, EvalBatchWorkflow) run an episode that ended for an
    infrastructure reason again, as a fresh episode (`<id>.r1`, ...), this many
    times."""
    group_retries: int = Field(default=1, ge=0)
    """Groups (`run_batch(groups=True)`): how many times each member that ended for an
    infrastructure reason (a lost worker, a model upstream that gave up, a provision
    that got no box) runs again as a fresh episode before its group is yielded failed."""
    group_timeout_s: Seconds | None = None
    """Groups: a group not complete this long after it was dispatched has its running
    members cancelled and is yielded partial (`group.partial`, the members that ended)
    or, with `group_on_timeout: drop`, not at all. None: groups wait for every member.
    `episodes run` streams groups when it is set."""
    group_on_timeout: Literal["partial", "drop"] = "partial"
    oversample: int = Field(default=0, ge=0, le=1024)
    """Groups: run `samples + oversample` members of each group and yield it once
    `samples` of them ended; the rest are cut (cancelled, `EpisodeResult.cut:
    straggler`, never exported). Short episodes win: docs/trainers.md says how that
    biases a batch. `episodes run` streams groups when it is set."""
    skip_zero_variance: bool = False
    """Groups: a group whose members all scored the same (`Group.zero_variance`: every
    advantage is 0, no GRPO signal) is counted, not yielded."""
    execution: Execution = "episode"
    """`episode`: every episode is its own workflow (the default). `group` (opt-in): a
    task's `samples` run as one workflow, its members addressed `<batch>.<task>.g.s<n>`
    (docs/trainers.md: Group execution): `run_batch` and batch workflows."""
    worker_lost_timeout_s: Seconds = 10.0
    """How long a session's worker may be silent (no heartbeat, no poll) before the
    episode ends with `worker_lost`. Detection takes at most about twice this."""
    score_timeout_s: Seconds = 300.0
    """How long the env's `score` may take; past it the episode ends `env_error`
    ("score timed out after N s"), unscored."""
    record: Literal["full", "truncate"] = "full"
    """`full`: every turn recorded whole (large payloads go to external storage; with
    no storage configured, a turn too big for the history is truncated anyway,
    with a marker and a warning). `truncate`: always cap with the two limits
    below."""
    record_max_value_bytes: int = Field(default=256 * 1024, ge=1024)
    """With `record: truncate` (or no storage): larger messages, replies and events
    are recorded as a marker with their size."""
    record_max_turn_bytes: int = Field(default=1024 * 1024, ge=4096, le=1536 * 1024)
    """What one recorded turn may take inline in history with `record: truncate` (or
    no external storage)."""
    concurrency: int = Field(default=16, ge=1)
    """Episodes of a batch in flight at once."""
    priority: int | None = Field(default=None, ge=1, le=5)
    """The batch's priority on shared workers: 1 (first) to 5 (last); None: the
    server's default, 3. Every workflow and activity of its episodes carries it
    (Temporal's task-queue priority; docs/operations/priority.md)."""
    fairness_key: str | None = Field(default=None, min_length=1, max_length=64)
    """Within one priority, batches share the workers by fairness key (a tenant, a team,
    `training` / `evals`), in proportion to `fairness_weight`."""
    fairness_weight: float | None = Field(default=None, ge=0.001, le=1000)
    """This fairness key's share relative to the others' (None: 1.0)."""
    budget: BatchBudget | None = None
    """Limits on the batch's spending (`max_model_tokens`, `max_model_calls`,
    `max_episode_seconds`): past one it starts no more episodes and ends
    `budget_exhausted`."""
    reuse_key: str | None = None
    """A template over task fields, e.g. "{task.id}" or "{task.data[repo]}"; episodes
    with the same rendered key may reuse a parked box on the same worker."""
    pool: PoolSpec = Field(default_factory=PoolSpec)
    """The pool's bounds for boxes kept under `reuse_key`, and its warm boxes (`warm`),
    which need no `reuse_key`."""
    prices: Prices | None = None
    """A price table (USD per million input, cached and output tokens per model, per
    box-second per runtime): each result's `cost`, the summaries' and the export's
    (docs/cost.md)."""
    model: ModelSpec | None = None
    """The upstream model behind the session's OpenAI-compatible proxy (docs/tools-
    and-models.md)."""

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not v or any(c.isspace() for c in v) or "/" in v:
            raise ValueError("name must be non-empty with no spaces or '/'")
        return v

    @model_validator(mode="before")
    @classmethod
    def _words(cls, data: Any) -> Any:
        """`harness: oracle` (a built-in harness by name) and `harbor:`'s defaults."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        word = data.get("harness")
        if isinstance(word, str):
            if word not in BUILTIN_HARNESSES:
                raise ValueError(
                    f"harness: {word!r} is not a built-in harness "
                    f"({', '.join(sorted(BUILTIN_HARNESSES))}); give {{command: [...]}}"
                )
            data["harness"] = {"command": list(BUILTIN_HARNESSES[word])}
        if data.get("harbor") is not None:
            data.setdefault("env", "harbor")
            data.setdefault("turn_timeout_s", HARBOR_TIMEOUT_S)
            data.setdefault("score_timeout_s", HARBOR_TIMEOUT_S)
            harness = data.get("harness")
            if isinstance(harness, dict) and "runtime" not in harness:
                data["harness"] = {**harness, "runtime": dict(HARBOR_RUNTIME)}
            if data.get("env") == "harbor":
                args = dict(data.get("env_args") or {})
                args.setdefault("retries", data.get("harbor_retries", 0))
                if word == "oracle":
                    args.setdefault("solution", True)
                data["env_args"] = args
        return data

    @model_validator(mode="after")
    def _check(self) -> EpisodeSpec:
        given = [k for k in ("tasks", "dataset", "harbor") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of 'tasks' (inline), 'dataset' (a JSONL path) or "
                "'harbor' (a Harbor task directory)"
            )
        if self.harbor is not None and any(r.type != "docker" for r in self.harness.runtimes):
            raise ValueError("harbor tasks run on the docker runtime (harness.runtime.type)")
        if self.tasks is not None and not self.tasks:
            raise ValueError("'tasks' is empty")
        if self.tasks is not None:
            ids = [t.id for t in self.tasks]
            dupes = sorted({i for i in ids if ids.count(i) > 1})
            if dupes:
                raise ValueError(f"task ids must be unique; repeated: {', '.join(dupes)}")
        # The drive's deadline is max_turns turns of turn_timeout_s, each with room to
        # stop a harness twice and 30 s more (EpisodeWorkflow): it must fit a protobuf
        # Duration, or the workflow task fails for good.
        drive_s = self.max_turns * (self.turn_timeout_s + 2 * self.harness.stop_timeout_s + 30)
        if drive_s > MAX_DRIVE_S:
            raise ValueError(
                "max_turns x (turn_timeout_s + 2 x harness.stop_timeout_s + 30 s) is "
                f"{drive_s:.3g} s, more than a workflow deadline may be ({MAX_DRIVE_S:.3g} s):"
                " lower max_turns, turn_timeout_s or harness.stop_timeout_s"
            )
        return self

    def load_tasks(self) -> list[Task]:
        """Inline tasks, or the dataset file read now (relative to the spec's folder)."""
        if self.tasks is not None:
            return list(self.tasks)
        if self.harbor is not None:
            return load_harbor_dir(self.harbor)
        assert self.dataset is not None
        return load_dataset(self.dataset)


def load_harbor_dir(path: Path) -> list[Task]:
    """One task per Harbor task directory: `path` itself when it has a task.toml, else
    each subdirectory that has one. Only the paths: the worker reads the tasks (the
    `harbor` env), `episodes harbor check` validates them."""
    if (path / "task.toml").is_file():
        dirs = [path]
    elif path.is_dir():
        dirs = sorted(p for p in path.iterdir() if (p / "task.toml").is_file())
    else:
        raise SpecError(f"harbor: {path} is not a directory")
    if not dirs:
        raise SpecError(f"harbor: {path} holds no task directory (none has a task.toml)")
    return [Task(id=d.name, data={"path": str(d.resolve())}) for d in dirs]


def load_dataset(path: Path) -> list[Task]:
    if not path.exists():
        raise SpecError(f"{path}: dataset file not found")
    tasks: list[Task] = []
    seen: set[str] = set()
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            task = Task.model_validate(json.loads(line))
        except json.JSONDecodeError as e:
            raise SpecError(f"{path}:{lineno}: not JSON ({e.msg})") from None
        except ValidationError as e:
            raise SpecError(f"{path}:{lineno}: {describe_validation(e)}") from None
        if task.id in seen:
            raise SpecError(f"{path}:{lineno}: task id {task.id!r} repeated")
        seen.add(task.id)
        tasks.append(task)
    if not tasks:
        raise SpecError(f"{path}: dataset has no tasks")
    return tasks


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds (through Optional, unions, lists, dicts
    and Annotated), for finding which fields a location's misspelt key stood among."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in get_args(annotation):
        found += [m for m in _models_in(arg) if m not in found]
    return found


def _field_names(model: type[BaseModel]) -> set[str]:
    return {n for name, f in model.model_fields.items() for n in (name, f.alias) if n}


def _siblings(root: type[BaseModel], loc: tuple[int | str, ...]) -> set[str]:
    """The field names a key at `loc` could have meant: those of the models found by
    following `loc[:-1]` from `root` (a union's tag or a list index stays put)."""
    models = [root]
    for part in loc[:-1]:
        nxt: list[type[BaseModel]] = []
        for m in models:
            field = m.model_fields.get(str(part))
            if field is not None:
                nxt += [x for x in _models_in(field.annotation) if x not in nxt]
        if nxt:
            models = nxt
        elif isinstance(part, str) and not any(
            part == str(getattr(m.model_fields.get("type"), "default", None)) for m in models
        ):
            # Neither a field nor a tag of the models here (a dict's key): below it,
            # any model the values may hold.
            models = [
                x for m in models for f in m.model_fields.values() for x in _models_in(f.annotation)
            ] or models
    return {n for m in models for n in _field_names(m)}


def did_you_mean(key: str, names: set[str]) -> str:
    """' (did you mean `max_turns`?)' when one name is close to `key`, else ''."""
    close = difflib.get_close_matches(key, sorted(names), n=1, cutoff=0.7)
    return f" (did you mean `{close[0]}`?)" if close else ""


def describe_validation(
    e: ValidationError,
    *,
    unknown: str = "unknown field",
    model: type[BaseModel] | None = None,
    where: Callable[[tuple[int | str, ...]], str | None] | None = None,
) -> str:
    """A pydantic error as one line: each field's path and what is wrong with it;
    `unknown` says what an extra field is (a spec's typo, a task file's unsupported key).
    With `model` (what was validated), a misspelt key names the field it is close to;
    with `where`, each part starts with the place in the file (`line 4: `)."""
    parts = []
    for err in e.errors():
        loc = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")  # pydantic's, for a validator's
        if err["type"] == "extra_forbidden":
            msg = unknown
            if model is not None and err["loc"]:
                msg += did_you_mean(str(err["loc"][-1]), _siblings(model, err["loc"]))
        # A check across fields (a model validator) has no location: its message names
        # the fields itself.
        part = f"{loc}: {msg}" if loc else msg
        place = where(err["loc"]) if where is not None and err["loc"] else None
        parts.append(f"{place}: {part}" if place else part)
    return "; ".join(parts)


SPEC_DIR = "{spec_dir}"
"""In a spec file's `harness.command`: the folder the spec file is in (absolute)."""


def parse_spec(
    data: Any,
    *,
    source: str = "<spec>",
    base_dir: Path | None = None,
    where: Callable[[tuple[int | str, ...]], str | None] | None = None,
) -> EpisodeSpec:
    """Validate a spec dict; errors name the field and `source` (and, with `where`, the
    place of each field in the file: `episodes.specfile` passes YAML's lines)."""
    if not isinstance(data, dict):
        raise SpecError(f"{source}: a spec must be a mapping, got {type(data).__name__}")
    try:
        spec = EpisodeSpec.model_validate(data)
    except ValidationError as e:
        described = describe_validation(e, model=EpisodeSpec, where=where)
        raise SpecError(f"{source}: {described}") from None
    for message in [*inline_secret_warnings(spec, source=source), *trust_warnings(spec, source)]:
        warnings.warn(message, SpecWarning, stacklevel=2)
    for key in ("dataset", "harbor"):
        path = getattr(spec, key)
        if path is not None and base_dir is not None and not path.is_absolute():
            spec = spec.model_copy(update={key: (base_dir / path).resolve()})
    if base_dir is not None and any(SPEC_DIR in part for part in spec.harness.command):
        # The box's working directory is never the spec's: files beside the spec (a
        # harness script) are named from the spec file's folder, resolved here, once.
        here = str(base_dir.resolve())
        command = [part.replace(SPEC_DIR, here) for part in spec.harness.command]
        spec = spec.model_copy(
            update={"harness": spec.harness.model_copy(update={"command": command})}
        )
    return spec


def inline_secret_warnings(spec: EpisodeSpec, *, source: str = "<spec>") -> list[str]:
    """One line per `harness.env` entry whose name looks like a secret (its value would
    travel in workflow inputs and history), naming the field and the better way."""
    return [
        f"{source}: harness.env.{name} looks like a secret written inline (it would be "
        f"stored in workflow history); use harness.secrets: {{{name}: {{env: HOST_VARIABLE}}}}"
        " or {file: PATH}, read on the worker"
        for name in spec.harness.env
        if _SECRET_LOOKING.search(name)
    ]


def trust_warnings(spec: EpisodeSpec, source: str = "<spec>") -> list[str]:
    """One line if an unsandboxed harness is handed credentials: with `isolation: none` it
    runs as the worker's user, so it can read the worker's upstream key and other
    sessions' tokens from /proc, not only the ones it is given (docs/containment.md)."""
    if not any(
        isinstance(r, SubprocessConfig) and r.isolation == "none" for r in spec.harness.runtimes
    ):
        return []
    given = [name for name, on in (("model", spec.model), ("secrets", spec.harness.secrets)) if on]
    if not given:
        return []
    return [
        f"{source}: harness.runtime.isolation: none with {' and '.join(given)}: the harness "
        "runs unsandboxed and can read the worker's keys and other sessions' tokens; "
        "keep the sandbox (the default) unless the harness is trusted"
    ]
