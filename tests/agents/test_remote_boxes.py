"""Modal and Prime boxes run elsewhere: tools and a model are refused with the reason.

Against the in-repo fakes of their SDKs: a box is really started, and the session's
services refuse it before any harness runs (a tunnel to the worker is not built).
"""

from __future__ import annotations

import pytest

from episodes.agents.services import AgentServices
from episodes.errors import SpecError
from episodes.spec import parse_spec
from tests.runtimes.backends import modal_fake, prime_fake


def put(key: str, value: str) -> str:
    """Store a value."""
    return "ok"


@pytest.mark.parametrize("backend", [modal_fake, prime_fake], ids=["modal", "prime"])
async def test_tools_on_a_remote_box_are_refused_naming_the_runtime(backend):
    runtime = backend.make_runtime()
    await runtime.start()
    try:
        services = AgentServices([put], None, session_id="s")
        kind = backend.NAME.split("-")[0]
        with pytest.raises(SpecError, match=f"harness.runtime '{kind}' cannot reach.*tunnel"):
            await services.start(runtime, kind)
        assert services.bridge is None  # nothing was left listening
    finally:
        await runtime.stop()


@pytest.mark.parametrize("kind", ["modal", "prime"])
def test_a_model_with_a_remote_runtime_is_a_spec_error(kind):
    with pytest.raises(SpecError, match=r"model: a \w+ box runs on another machine"):
        parse_spec(
            {
                "name": "m",
                "env": "script",
                "tasks": [{"id": "t"}],
                "harness": {"command": "x", "runtime": {"type": kind}},
                "model": {"base_url": "http://127.0.0.1:1/v1", "model": "m"},
            },
            source="m.yaml",
        )
