"""A worker whose boxes cannot start stops taking provisions (episodes/breaker.py).

The breaker's rules on a fake clock, then the real provision activity (Temporal's
ActivityEnvironment, no server) against a Docker engine that is not there: three
failures open it and the worker's provision slots give out nothing; a harness that
cannot start (the agent's outcome) does not count; a provision that works closes it.
"""

from __future__ import annotations

import sys

import pytest
from temporalio.testing import ActivityEnvironment

from activities.session import SessionActivities
from episodes.breaker import ProvisionBreaker
from episodes.runtimes.docker import engine as docker_engine
from episodes.session.registry import SessionRegistry
from episodes.types.io import ProvisionInput
from tests.support.helpers import spec
from workers.backpressure import SessionSlots


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_opens_after_the_threshold_backs_off_and_closes_on_success():
    clock = Clock()
    b = ProvisionBreaker(threshold=3, cooldown_s=10, max_cooldown_s=25, clock=clock)
    b.failure(RuntimeError("engine down"))
    b.failure(RuntimeError("engine down"))
    assert not b.is_open() and b.failures == 2
    b.failure(RuntimeError("engine down\nmore lines"))
    assert b.is_open() and b.opened == 1 and b.last_error == "RuntimeError: engine down"
    clock.now += 10
    assert not b.is_open()  # the cooldown ended: it takes one provision again
    b.failure(RuntimeError("still down"))
    assert b.is_open()  # and backs off for longer: 20 s
    clock.now += 19
    assert b.is_open()
    clock.now += 1
    b.failure(RuntimeError("still down"))
    clock.now += 24
    assert b.is_open()  # capped at 25 s
    clock.now += 1
    assert not b.is_open()
    b.success()
    assert b.failures == 0 and not b.is_open()
    b.failure(RuntimeError("once"))
    assert not b.is_open()  # the count starts again


def test_slots_give_out_no_permit_while_the_breaker_is_open():
    clock = Clock()
    b = ProvisionBreaker(threshold=1, cooldown_s=5, clock=clock)
    slots = SessionSlots(SessionRegistry(4), b)
    assert slots.try_reserve_slot(None) is not None  # type: ignore[arg-type]
    b.failure(RuntimeError("x"))
    assert slots.try_reserve_slot(None) is None  # type: ignore[arg-type]
    clock.now += 5
    assert slots.try_reserve_slot(None) is not None  # type: ignore[arg-type]


def _provision(s) -> ProvisionInput:  # type: ignore[no-untyped-def]
    return ProvisionInput(spec=s, task=s.tasks[0], sample=0, workflow_id="wf", run_id="r")


async def test_the_provision_activity_feeds_the_breaker(monkeypatch):
    registry = SessionRegistry(8)
    breaker = ProvisionBreaker(threshold=3, cooldown_s=60)
    slots = SessionSlots(registry, breaker)
    acts = SessionActivities(registry, session_queue="q", worker_id="w", breaker=breaker)
    env = ActivityEnvironment()

    # The agent's outcome is no sign of a broken worker: not counted.
    exits = spec(name="exits", command=[sys.executable, "-c", "raise SystemExit(3)"])
    for _ in range(4):
        with pytest.raises(Exception, match=r"exited|start"):
            await env.run(acts.provision, _provision(exits))
    assert breaker.failures == 0 and not breaker.is_open()

    # A spec naming an image this engine lacks: maybe the spec's fault, not counted
    # (one bad spec must not pause the fleet). Needs an engine to ask; skipped without.
    if docker_engine.docker is not None:
        try:
            docker_engine.shared_client()
        except Exception:
            pass
        else:
            typo = spec(name="typo", harness={"runtime": {"type": "docker", "image": "nope:0"}})
            for _ in range(4):
                with pytest.raises(Exception, match="'nope:0' is not on this engine"):
                    await env.run(acts.provision, _provision(typo))
            assert breaker.failures == 0

    # No Docker engine where this worker looks for one: a fault of the worker.
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    monkeypatch.setattr(docker_engine, "_client", None)
    docker = spec(name="docker", harness={"runtime": {"type": "docker"}})
    for _ in range(3):
        with pytest.raises(Exception, match=r"no Docker engine answers|docker SDK"):
            await env.run(acts.provision, _provision(docker))
    assert breaker.is_open() and breaker.failures == 3
    assert slots.try_reserve_slot(None) is None  # type: ignore[arg-type]
    assert registry.entries() == []

    # A provision that works (here: a subprocess box) closes it.
    ref = await env.run(acts.provision, _provision(spec(name="ok")))
    assert breaker.failures == 0 and not breaker.is_open()
    session = registry.pop(ref.session_id)
    assert session is not None
    await session.close()
