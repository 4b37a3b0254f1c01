"""Which activity timeouts mean a lost worker: heartbeat and schedule-to-start only."""

from __future__ import annotations

import pytest
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    RetryState,
    TimeoutError,
    TimeoutType,
)

from episodes import contract
from episodes.types.metrics import MetricsAccumulator
from workflows.failures import classify, last_heartbeat_turn


def _activity_error(cause: BaseException) -> ActivityError:
    e = ActivityError(
        "Activity task failed",
        scheduled_event_id=1,
        started_event_id=2,
        identity="w",
        activity_type="drive",
        activity_id="1",
        retry_state=RetryState.TIMEOUT,
    )
    e.__cause__ = cause
    return e


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        (TimeoutType.HEARTBEAT, "lost"),
        (TimeoutType.SCHEDULE_TO_START, "lost"),
        (TimeoutType.START_TO_CLOSE, "backstop"),
        (TimeoutType.SCHEDULE_TO_CLOSE, "backstop"),
    ],
)
def test_only_heartbeat_and_schedule_to_start_timeouts_are_a_lost_worker(kind, expected):
    e = _activity_error(TimeoutError("timeout", type=kind, last_heartbeat_details=[{"turn": 7}]))
    assert classify(e) == expected
    assert last_heartbeat_turn(e) == 7


def test_session_not_found_is_lost_and_other_failures_are_not():
    lost = ApplicationError("gone", type=contract.SESSION_NOT_FOUND)
    assert classify(_activity_error(lost)) == "lost"
    assert classify(_activity_error(ApplicationError("bug", type="ValueError"))) is None


def test_metrics_count_infra_failures_and_retries_apart():
    acc = MetricsAccumulator()
    acc.add("a", "worker_lost", None, 1.0, infra=True, retries=1)
    acc.add("b", "harness_crashed", 0.0, 1.0)
    m = acc.summary()
    assert (m.count, m.infra_failures, m.retried) == (2, 1, 1)
    # Old accumulators (carried by a batch across continue-as-new) still load.
    assert MetricsAccumulator.model_validate({"count": 3}).infra_failures == 0
