"""An episode is a trace: a traced client starts it, traced workers run it, one of them
is SIGKILLed mid-episode, and a loopback OTLP receiver gets the spans.

What the receiver must hold, in the one trace the workflow id names (`trace_id_of`):
the SDK interceptor's client, workflow and activity spans; the provision with its box
and harness events; the restore; each turn, model call (`gen_ai.*`) and tool call run
on the surviving worker, and no span for a turn or call it replayed from the record;
the score with its reward.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import uuid
from collections import Counter
from pathlib import Path

import pytest

from episodes.client.connect import connect
from episodes.model.scripted.server import ScriptedUpstream
from episodes.traces import trace_id_of
from episodes.types.results import EpisodeResult
from tests.conftest import ROOT
from tests.support.helpers import spec
from tests.support.notebook import NOTEBOOK, sampling_policy
from tests.support.otlp import OtlpReceiver, waterfall_html
from tests.workflows.test_restart import _kill_holder

pytestmark = pytest.mark.timeout(300)
QUEUE = ("--task-queue",)

START = textwrap.dedent(
    """
    import asyncio, json, sys
    from episodes.client.connect import connect
    from episodes.client.starting import start_options, start_or_attach
    from episodes.types.io import EpisodeInput
    from episodes.types.results import EpisodeResult
    from episodes.types.spec import EpisodeSpec

    async def main():
        address, queue, wid, spec_json = sys.argv[1:5]
        s = EpisodeSpec.model_validate_json(spec_json)
        client = await connect(address)
        inp = EpisodeInput(spec=s, task=s.tasks[0], turns_per_run=100, batch=s.name)
        options = start_options(s, s.tasks[0], s.name, workflow_id=wid, task_queue=queue,
                                summary="traced")
        await start_or_attach(client, "EpisodeWorkflow", inp, EpisodeResult, options)

    asyncio.run(main())
    """
)


def _traced_worker(address: str, queue: str, otel: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "episodes.cli.main", "worker", "--address", address, *QUEUE, queue],
        cwd=ROOT,
        env={**os.environ, **otel},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def test_an_episode_restarted_after_a_worker_sigkill_is_one_trace(dev_server, tmp_path):
    queue = f"traces-{uuid.uuid4().hex[:6]}"
    with OtlpReceiver() as otlp:
        procs = [_traced_worker(dev_server.address, queue, otlp.env()) for _ in range(2)]
        client = await connect(dev_server.address)  # untraced: this process sets no OTEL_*
        try:
            async with ScriptedUpstream(policy=sampling_policy) as upstream:
                s = spec(
                    name=f"tr-{uuid.uuid4().hex[:6]}",
                    env=NOTEBOOK,
                    env_args={"delay_s": 0.3},
                    max_turns=8,
                    turn_timeout_s=30.0,
                    on_worker_lost="restart",
                    worker_lost_timeout_s=3,
                    harness={
                        "command": ["{python}", "-m", "episodes.harness.reference.llm"],
                        "ready_timeout_s": 30.0,
                    },
                    model={"base_url": upstream.base_url, "model": "scripted"},
                )
                wid = s.name
                started = subprocess.run(
                    [
                        sys.executable,
                        "-c",
                        START,
                        dev_server.address,
                        queue,
                        wid,
                        s.model_dump_json(),
                    ],
                    cwd=ROOT,
                    env={**os.environ, **otlp.env("trainer")},
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                assert started.returncode == 0, started.stderr
                handle = client.get_workflow_handle(wid, result_type=EpisodeResult)
                killed, _, _ = await _kill_holder(handle, procs, 3)
                result = await asyncio.wait_for(handle.result(), 180)
                [survivor] = [p for p in procs if p is not killed]
                survivor.terminate()  # a clean stop flushes what it buffered
                assert survivor.wait(timeout=60) == 0
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        spans = otlp.of_trace(trace_id_of(wid))

    assert (result.termination, result.restarts) == ("max_turns", 1), result.error
    replayed = result.turns_replayed
    assert replayed >= 3
    names = Counter(s.name for s in spans)
    # The SDK's interceptor: the traced client's start, the workflow, its activities.
    assert names["StartWorkflow:EpisodeWorkflow"] == 1, names
    assert names["RunWorkflow:EpisodeWorkflow"] >= 1, names
    assert names["RunActivity:provision"] >= 1 and names["RunActivity:restore"] == 1, names
    # Every span of every process that took part is in the episode's one trace.
    services = {s.resource.get("service.name") for s in spans}
    assert {"trainer", "episodes-worker"} <= services, services

    pid = str(survivor.pid)
    mine = [s for s in spans if str(s.resource.get("service.instance.id", "")).endswith(pid)]
    [restore] = [s for s in mine if s.name == "episodes.restore"]
    assert restore.attributes["episodes.turns_replayed"] == replayed
    [provision] = [s for s in mine if s.name == "episodes.provision"]
    assert provision.events == ["box started", "harness ready"]

    # Replay-safe: the survivor wrote each turn it ran once, and none it replayed.
    turns = Counter(
        s.attributes["episodes.turn"] for s in mine if s.name.startswith("episodes.turn")
    )
    assert turns == Counter(range(replayed, 8)), turns
    # Its model calls: two a live turn (a note, then a reply), none for the replay.
    calls = [s for s in mine if s.name == "chat scripted"]
    assert len(calls) == 2 * (8 - replayed)
    by_id = {s.span_id: s for s in mine}
    for call in calls:
        assert by_id[call.parent_id].name.startswith("episodes.turn")
        assert call.attributes["gen_ai.operation.name"] == "chat"
        assert call.attributes["gen_ai.request.model"] == "scripted"
        assert call.attributes["gen_ai.usage.input_tokens"] > 0
        assert call.attributes["gen_ai.usage.output_tokens"] > 0
        assert call.attributes["server.address"] == upstream.base_url
    tools = [s for s in mine if s.name == "execute_tool note"]
    assert len(tools) == 8 - replayed
    assert all(t.attributes["gen_ai.tool.name"] == "note" for t in tools)
    [score] = [s for s in mine if s.name == "episodes.score"]
    assert score.attributes["episodes.reward"] == result.reward
    # The MCP SDK's own spans are left out: the execute_tool spans stand for them.
    assert {s.scope for s in spans} <= {
        "episodes",
        "temporalio.contrib.opentelemetry._interceptor",
    }, {s.scope for s in spans}
    # Nothing exported by either worker is an unfinished span.
    assert all(s.end_ns >= s.start_ns > 0 for s in spans)
    print(json.dumps(dict(names), sort_keys=True))
    if os.environ.get("EPISODES_TRACE_HTML"):  # the docs' picture (docs/operations/metrics.md)
        Path(os.environ["EPISODES_TRACE_HTML"]).write_text(
            waterfall_html(spans, f"trace {trace_id_of(wid)}: {wid}")
        )
