"""Any Docker image gets the runtime bundle, not only Harbor's: a spec with `model:` and
tools on a plain busybox image (no Python, not built by scripts/build-image.sh) runs
its harness, the in-box relay and the tool and model calls through it, and ends
`env_done`; the project's own images keep their own Python."""

from __future__ import annotations

import pytest

from episodes.local import run_episode_local
from episodes.model.scripted.server import ScriptedUpstream, kv_policy
from episodes.types.spec import parse_spec
from tests.episodes.session.test_agent_session import UPSTREAM_KEY, agent_spec
from tests.support.backends import docker as backend
from tests.support.harbor.images import BUSYBOX_IMAGE, busybox_reason

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module", autouse=True)
def _engine() -> None:
    reason = backend.skip_reason() or busybox_reason()
    if reason:
        pytest.skip(reason)


# A harness of the user's own, stdlib only (it runs on the bundle's Python: busybox has
# none): one model call through the proxy, then the env's `put` tool over MCP.
HARNESS = r"""
import json, os, sys, urllib.request
sys.path.insert(0, "{episodes}")
from episodes.harness import sdk

def post(url, body, headers):
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    req = urllib.request.Request(url, json.dumps(body).encode(), {**h, **headers})
    with urllib.request.urlopen(req, timeout=60) as r:
        text, sid = r.read().decode(), r.headers.get("mcp-session-id")
    lines = [l[5:] for l in text.splitlines() if l.startswith("data:")]
    return (json.loads(lines[-1]) if lines else json.loads(text) if text else None), sid

def handle(turn, message, emit):
    reply, _ = post(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        {"model": "scripted", "messages": [{"role": "user", "content": json.dumps(message)}]},
        {"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
    assert reply["choices"], reply
    url = os.environ["EPISODES_MCP_URL"]
    auth = {"Authorization": "Bearer " + os.environ["EPISODES_MCP_TOKEN"]}
    _, sid = post(url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "box", "version": "0"}}}, auth)
    h = {**auth, "mcp-session-id": sid} if sid else auth
    post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, h)
    for n, (k, v) in enumerate((("a", "1"), ("b", "2"))):
        done, _ = post(url, {"jsonrpc": "2.0", "id": 2 + n, "method": "tools/call",
            "params": {"name": "put", "arguments": {"key": k, "value": v}}}, h)
        assert not done["result"].get("isError"), done
    return "done"

sdk.serve(handle)
"""


async def test_a_plain_image_with_model_and_tools_ends_env_done(monkeypatch) -> None:
    monkeypatch.setenv("EPISODES_TEST_UPSTREAM_KEY", UPSTREAM_KEY)
    async with ScriptedUpstream(policy=kv_policy, key=UPSTREAM_KEY) as upstream:
        data = agent_spec(upstream.base_url, name="own-image")
        data["harness"]["command"] = ["{python}", "-I", "-c", HARNESS]
        data["harness"]["runtime"] = {"type": "docker", "image": BUSYBOX_IMAGE}
        data["harness"]["ready_timeout_s"] = 120
        spec = parse_spec(data)
        result = await run_episode_local(spec, spec.tasks[0])
    assert result.termination == "env_done", result.error
    assert result.reward == 1.0
    assert backend.leftovers() == []


@pytest.mark.parametrize(
    ("image", "setting", "mounted"),
    [
        (BUSYBOX_IMAGE, None, True),
        (BUSYBOX_IMAGE, False, False),
        (backend.IMAGE, None, False),  # the project's: its own python3 and /opt/episodes
        (backend.IMAGE, True, True),
    ],
)
async def test_which_boxes_get_the_bundle(image, setting, mounted) -> None:
    from episodes.runtimes.docker.bundle import BUNDLE_IN_BOX
    from episodes.runtimes.docker.runtime import DockerRuntime
    from episodes.types.runtime import DockerConfig

    box = DockerRuntime(DockerConfig(image=image, runtime_bundle=setting), labels=backend.labels())
    await box.start()
    try:
        info = backend.client().api.inspect_container(box.name)
        targets = {m["Destination"] for m in info["Mounts"]}
        assert (BUNDLE_IN_BOX in targets) is mounted, targets
        assert (box.box_python == f"{BUNDLE_IN_BOX}/python3") is mounted
    finally:
        await box.stop()
