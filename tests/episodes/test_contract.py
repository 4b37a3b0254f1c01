"""The implementations honour `episodes.contract`: activity names and signatures, and
the failure types each side raises and the other side expects (no server needed)."""

from __future__ import annotations

import inspect
import typing
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

import activities.batch
import activities.group
import activities.session
from activities.recorder import TurnRecorder
from activities.session import SessionActivities
from episodes import contract
from episodes.client.interactive import InteractiveSession
from episodes.errors import (
    EnvironmentLoadError,
    HarnessFailure,
    SpecError,
    StepRejected,
    TurnOutOfOrder,
)
from episodes.session.registry import SessionRegistry
from episodes.types.io import (
    InteractiveInput,
    ScoreInput,
    ScoreTranscriptInput,
    SessionOpened,
    StepInput,
    TurnInput,
)
from episodes.types.results import StepOutcome, Task, Transcript, TurnRecord, TurnResult
from episodes.types.spec import parse_spec
from workflows.episode import EpisodeWorkflow
from workflows.interactive import InteractiveEpisodeWorkflow


def _activities() -> SessionActivities:
    return SessionActivities(SessionRegistry(), session_queue="q", worker_id="w")


def _implemented() -> list[Any]:
    """Every activity the activities/ package defines (what workers register)."""
    found = [fn for _, fn in inspect.getmembers(_activities(), inspect.ismethod)]
    groups = activities.group.GroupActivities(worker_id="w")
    found += [fn for _, fn in inspect.getmembers(groups, inspect.ismethod)]
    for module in (activities.session, activities.batch, activities.group):
        found += [fn for _, fn in inspect.getmembers(module, inspect.isfunction)]
    return [fn for fn in found if activity._Definition.from_callable(fn) is not None]


def _name(fn: Any) -> str:
    defn = activity._Definition.from_callable(fn)
    assert defn is not None and defn.name, fn
    return defn.name


def _shape(fn: Any) -> tuple[list[tuple[str, Any]], Any]:
    hints = typing.get_type_hints(fn)
    params = [(p.name, hints.get(p.name)) for p in inspect.signature(fn).parameters.values()]
    return params, hints.get("return")


def test_every_activity_matches_its_declaration() -> None:
    declared = {_name(d): d for d in contract.DECLARED}
    implemented = {_name(fn): fn for fn in _implemented()}
    assert set(implemented) == set(declared)
    for name, fn in implemented.items():
        assert _shape(fn) == _shape(declared[name]), name
        assert inspect.iscoroutinefunction(fn) == inspect.iscoroutinefunction(declared[name])


def test_failure_type_names_are_the_exception_class_names() -> None:
    assert contract.TURN_OUT_OF_ORDER == TurnOutOfOrder.__name__
    assert contract.SPEC_ERROR == SpecError.__name__
    assert contract.ENVIRONMENT_LOAD_ERROR == EnvironmentLoadError.__name__
    kinds = set()
    stack = [HarnessFailure]
    while stack:
        cls = stack.pop()
        kinds.add(cls.error_type)
        stack += cls.__subclasses__()
    assert set(contract.PROVISION_FAILURES) <= kinds
    # Every spec error leaves the worker as a type the workflow reads as a configuration
    # error (not a failed workflow): its own name, or SpecError.
    import episodes.envs.harbor.task  # noqa: F401  (a subclass of its own)

    specs, stack = set(), [SpecError]
    while stack:
        cls = stack.pop()
        specs.add(cls)
        stack += cls.__subclasses__()
    assert set(contract.SPEC_ERRORS) <= {c.__name__ for c in specs}
    assert {activities.session.spec_error_type(c("x")) for c in specs} <= set(contract.SPEC_ERRORS)


async def test_an_unknown_session_fails_as_session_not_found() -> None:
    acts = _activities()
    for call in (
        acts.turn(TurnInput(session_id="gone", turn=0)),
        acts.score(ScoreInput(session_id="gone")),
    ):
        with pytest.raises(ApplicationError) as e:
            await call
        assert e.value.type == contract.SESSION_NOT_FOUND and e.value.non_retryable


async def test_a_turn_out_of_order_keeps_its_type() -> None:
    class Session:
        session_id = "s1"

        async def turn(self, n: int, **_: Any) -> TurnResult:
            raise TurnOutOfOrder(f"turn {n} asked for, next is 3")

    acts = _activities()
    acts.registry.add(Session(), "wf", "run")  # type: ignore[arg-type]
    with pytest.raises(ApplicationError) as e:
        await ActivityEnvironment().run(acts.turn, TurnInput(session_id="s1", turn=0))
    assert e.value.type == contract.TURN_OUT_OF_ORDER and e.value.non_retryable


async def test_an_unknown_env_is_a_non_retryable_spec_error() -> None:
    transcript = Transcript(task=Task(id="t"), turns=[])
    with pytest.raises(ApplicationError) as e:
        await activities.session.score_transcript_activity(
            ScoreTranscriptInput(env="no_such_module:Env", transcript=transcript)
        )
    assert e.value.type in contract.NON_RETRYABLE_PROVISION


async def test_a_failed_episode_is_episode_failed() -> None:
    class Handle:
        async def result(self) -> None:
            raise WorkflowFailureError(cause=ApplicationError("boom"))

    class Client:
        def get_workflow_handle(self, *_: Any, **__: Any) -> Handle:
            return Handle()

    env = ActivityEnvironment(client=Client())  # type: ignore[arg-type]
    with pytest.raises(ApplicationError) as e:
        await env.run(activities.batch.await_episode, "b.t.s0")
    assert e.value.type == contract.EPISODE_FAILED


def _result(turn: int) -> TurnResult:
    return TurnResult(record=TurnRecord(turn=turn), observation=StepOutcome())


async def test_the_recorder_goes_on_past_turns_the_workflow_holds() -> None:
    wf = EpisodeWorkflow()
    wf._driving = True
    wf._turns = [_result(0).record, _result(1).record]
    with pytest.raises(ApplicationError) as held:
        wf._check_turns([_result(0), _result(1)])
    wf._driving = False
    with pytest.raises(ApplicationError) as rejected:
        wf._check_turns([_result(2)])
    assert rejected.value.type == contract.TURNS_REJECTED

    class Handle:
        def __init__(self, error: ApplicationError) -> None:
            self.error = error

        async def execute_update(self, *_: Any, **__: Any) -> bool:
            raise WorkflowUpdateFailedError(self.error)

    recorder = TurnRecorder(Handle(held.value), "s", max_update_bytes=1 << 20)  # type: ignore[arg-type]
    recorder.add(_result(0))
    await recorder.flush()  # a replayed batch is not an error
    assert recorder.unrecorded == 0 and not recorder.stop

    recorder = TurnRecorder(Handle(rejected.value), "s", max_update_bytes=1 << 20)  # type: ignore[arg-type]
    recorder.add(_result(2))
    with pytest.raises(WorkflowUpdateFailedError):
        await recorder.flush()


async def test_a_rejected_step_reaches_the_trainer_as_step_rejected() -> None:
    spec = parse_spec(
        {"name": "n", "env": "script", "tasks": [{"id": "t"}], "harness": {"command": "x"}}
    )
    # Still provisioning: every step is rejected.
    wf = InteractiveEpisodeWorkflow(InteractiveInput(spec=spec, task=spec.tasks[0]))
    with pytest.raises(ApplicationError) as e:
        wf._validate_step(StepInput(turn=0))

    class Handle:
        id = "b.t.s0.session"

        async def execute_update(self, *_: Any, **__: Any) -> None:
            raise WorkflowUpdateFailedError(e.value)

    session = InteractiveSession(Handle(), SessionOpened())  # type: ignore[arg-type]
    with pytest.raises(StepRejected, match="still starting"):
        await session.step("hello")


def test_workflow_ids() -> None:
    spec = parse_spec(
        {
            "name": "n",
            "env": "script",
            "tasks": [{"id": "t1"}, {"id": "t2"}],
            "harness": {"command": "x"},
        }
    )
    assert contract.episode_id("b", "t1", 3) == "b.t1.s3"
    assert contract.session_workflow_id("b", "t1", 3) == "b.t1.s3.session"
    assert contract.batch_workflow_id("b") == "batch.b"
    one = contract.single_task_spec(spec, spec.tasks[1])
    assert [t.id for t in one.tasks or []] == ["t2"] and one.dataset is None
