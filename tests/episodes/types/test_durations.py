"""Every duration a spec or a workflow input carries is finite and bounded (issue 19).

`inf` or 1e13 s used to validate; the workflow then built a timedelta or a protobuf
Duration from it and its task failed forever. Each is now refused when the spec is
read, with the field named.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from episodes.errors import SpecError
from episodes.types import io, model, runtime, spec
from episodes.types.io import DriveInput, InteractiveInput
from episodes.types.spec import parse_spec

BASE: dict[str, Any] = {
    "name": "d",
    "env": "script",
    "tasks": [{"id": "t"}],
    "harness": {"command": ["x"]},
}
MODEL = {"base_url": "http://h/v1", "model": "m"}

# (where in the spec, the field's dotted name in the error)
SPEC_FIELDS = [
    ({"turn_timeout_s": None}, "turn_timeout_s"),
    ({"worker_lost_timeout_s": None}, "worker_lost_timeout_s"),
    ({"score_timeout_s": None}, "score_timeout_s"),
    ({"harness": {"command": ["x"], "ready_timeout_s": None}}, "harness.ready_timeout_s"),
    ({"harness": {"command": ["x"], "stop_timeout_s": None}}, "harness.stop_timeout_s"),
    ({"pool": {"ttl_s": None}}, "pool.ttl_s"),
    ({"model": {**MODEL, "timeout_s": None}}, "model.timeout_s"),
    (
        {"harness": {"command": ["x"], "runtime": {"type": "modal", "timeout_s": None}}},
        "harness.runtime.modal.timeout_s",
    ),
]
BAD = [math.inf, -math.inf, math.nan, 1e13, 31 * 86400, 0, -1]  # at most 30 days


def _with(where: dict[str, Any], value: float) -> dict[str, Any]:
    def fill(d: dict[str, Any]) -> dict[str, Any]:
        return {
            k: (fill(v) if isinstance(v, dict) else value if v is None else v) for k, v in d.items()
        }

    return {**BASE, **fill(where)}


@pytest.mark.parametrize("value", BAD, ids=str)
@pytest.mark.parametrize(("where", "name"), SPEC_FIELDS, ids=[n for _, n in SPEC_FIELDS])
def test_a_spec_duration_must_be_finite_positive_and_bounded(where, name, value) -> None:
    with pytest.raises(SpecError) as e:
        parse_spec(_with(where, value))
    message = str(e.value)
    assert f"{name}:" in message, message
    assert "\n" not in message


@pytest.mark.parametrize(("where", "name"), SPEC_FIELDS, ids=[n for _, n in SPEC_FIELDS])
def test_a_spec_duration_of_days_is_fine(where, name) -> None:
    parse_spec(_with(where, 7 * 86400))


@pytest.mark.parametrize("value", [math.inf, math.nan, 1e13])
def test_an_interactive_idle_timeout_is_bounded_too(value) -> None:
    with pytest.raises(ValidationError, match="idle_timeout_s"):
        InteractiveInput(spec=parse_spec(BASE), task={"id": "t"}, idle_timeout_s=value)


@pytest.mark.parametrize("field", ["max_lag_s", "linger_s"])
def test_drive_lags_may_be_zero_but_not_infinite(field) -> None:
    base = {"session_id": "s", "workflow_id": "w", "run_id": "r", "max_turns": 1}
    DriveInput.model_validate({**base, field: 0})
    with pytest.raises(ValidationError, match=field):
        DriveInput.model_validate({**base, field: math.inf})


# Measured, not configured: what a result reports may be any length.
MEASURED = {"duration_s", "elapsed_s"}


def _input_models() -> list[type[BaseModel]]:
    found = []
    for module in (spec, runtime, model, io):
        for obj in vars(module).values():
            if (
                isinstance(obj, type)
                and issubclass(obj, BaseModel)
                and obj.__module__ == module.__name__
            ):
                found.append(obj)
    return found


def test_every_duration_field_refuses_infinity() -> None:
    """A new `*_s` field that forgets the shared type fails here."""
    unbounded = []
    for cls in _input_models():
        for name in cls.model_fields:
            if not name.endswith("_s") or name in MEASURED:
                continue
            validator = cls.__pydantic_validator__
            try:
                validator.validate_assignment(cls.model_construct(), name, math.inf)
            except ValidationError:
                continue
            unbounded.append(f"{cls.__name__}.{name}")
    assert unbounded == []


def test_max_turns_times_turn_timeout_must_fit_a_workflow_deadline() -> None:
    # Each is within bounds; their product (the drive's deadline) would not fit.
    with pytest.raises(SpecError) as e:
        parse_spec({**BASE, "max_turns": 10**6, "turn_timeout_s": 30 * 86400})
    # The message states the formula the check uses, naming every field in it, and
    # blames no "(top level)" (issue 27).
    formula = "max_turns x (turn_timeout_s + 2 x harness.stop_timeout_s + 30 s)"
    assert formula in str(e.value) and "top level" not in str(e.value), str(e.value)
    parse_spec({**BASE, "max_turns": 10**4, "turn_timeout_s": 86400})
    # The stop timeouts and the 30 s count: turn_timeout_s alone would fit here.
    with pytest.raises(SpecError, match=r"harness\.stop_timeout_s"):
        parse_spec(
            {
                **BASE,
                "max_turns": 10**6,
                "turn_timeout_s": 1,
                "harness": {"command": ["x"], "stop_timeout_s": 30 * 86400},
            }
        )
