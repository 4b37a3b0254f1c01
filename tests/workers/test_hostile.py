"""Hostile harnesses beside healthy ones on one real worker: each hostile episode ends
with a named termination, the healthy ones complete, the worker's memory stays bounded
and no process or container is left."""

from __future__ import annotations

import os
import signal
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest

from episodes.runtimes.sandbox import cgroup
from episodes.types.spec import EpisodeSpec
from tests.support.chaos.envs import FLOOD
from tests.support.chaos.helpers import (
    HARNESS,
    WorkerProc,
    containers_of,
    docker_api,
    new_tag,
    results,
    script_spec,
    start_all,
    tagged_processes,
    turns,
    wait_closed,
)
from tests.support.helpers import wait_until

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.timeout(180)]

TURN_TIMEOUT_S = 10.0
# Generous: a Python worker holding an 8 MiB message (and its JSON frame) a few times.
RSS_GROWTH_BOUND_MIB = 300
MOUNT = "/mnt/tests/harnesses"  # as deep as in a checkout: chaos_harness.py looks 3 up


class WorkerRss:
    """Samples one process's RSS from a thread; keeps the baseline and the peak."""

    def __init__(self, pid: int, interval_s: float = 0.05) -> None:
        self.proc = psutil.Process(pid)
        self.baseline = self.peak = self.proc.memory_info().rss
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, self.proc.memory_info().rss)
            except psutil.NoSuchProcess:
                return
            self._stop.wait(self._interval)

    @property
    def growth_mib(self) -> float:
        return (self.peak - self.baseline) / 2**20

    def __enter__(self) -> WorkerRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _spec(kind: str, command: list[str], n_turns: int = 4, **over: Any) -> EpisodeSpec:
    name = f"{kind}-{uuid.uuid4().hex[:6]}"
    return script_spec(
        name, {kind: turns(kind, n_turns)}, command, turn_timeout_s=TURN_TIMEOUT_S, **over
    )


def _docker(**fields: Any) -> dict[str, Any]:
    mount = {"source": str(HARNESS.parent), "target": MOUNT, "read_only": True}
    return {"runtime": {"type": "docker", "mounts": [mount], **fields}}


def _assert_limit(result: Any, limit: str) -> None:
    """One named outcome: the agent's doing, the limit named in the error."""
    assert result.termination == "limit_exceeded", result
    assert f"its {limit} limit" in (result.error or ""), result


async def _run_beside(
    chaos_server, client, tmp_path, specs: dict[str, EpisodeSpec], tag: str
) -> tuple[dict[str, Any], WorkerRss, WorkerProc]:
    queue = f"hostile-{uuid.uuid4().hex[:6]}"
    worker = WorkerProc(chaos_server.address, queue, tmp_path / "worker.log").start()
    try:
        await worker.ready()
        ids: dict[str, str] = {}
        with WorkerRss(worker.pid) as rss:
            for kind, spec in specs.items():
                [ids[kind]] = await start_all(client, queue, spec)
            closed = await wait_closed(client, list(ids.values()), timeout_s=120)
            assert len(closed) == len(ids), f"stuck: {set(ids.values()) - set(closed)}"
        by_id = await results(client, list(ids.values()))
    except BaseException:
        worker.kill()  # the caller never gets it to clean up
        raise
    out = {kind: by_id[wid] for kind, wid in ids.items()}
    for kind, r in out.items():
        print(f"  {kind}: {r.termination} after {r.duration_s:.1f} s; {(r.error or '')[:90]!r}")
    print(
        f"  worker RSS {rss.baseline / 2**20:.0f} MiB -> peak {rss.peak / 2**20:.0f} MiB "
        f"(+{rss.growth_mib:.0f} MiB)"
    )
    return out, rss, worker


async def test_harness_that_never_reads_while_the_host_writes_8_mib(
    chaos_server, chaos_client, tmp_path
):
    tag = new_tag()
    echo = ["{python}", str(HARNESS), "log", "delay=0.2", f"tag={tag}"]
    specs = {
        "deaf": script_spec(
            f"deaf-{uuid.uuid4().hex[:6]}",
            {"deaf": ["unused"]},
            ["{python}", str(HARNESS), "deaf", f"tag={tag}"],
            env=FLOOD,
            env_args={"mb": 8},
            turn_timeout_s=TURN_TIMEOUT_S,
        ),
        "healthy-1": _spec("healthy1", echo),
        "healthy-2": _spec("healthy2", echo),
    }
    print("\nhostile (subprocess):")
    worker = None
    try:
        out, rss, worker = await _run_beside(chaos_server, chaos_client, tmp_path, specs, tag)
        assert out["deaf"].termination == "turn_timeout", out["deaf"]
        assert out["deaf"].turns == 2  # turn 0 answered, turn 1 never read
        assert out["healthy-1"].termination == out["healthy-2"].termination == "env_done"
        assert rss.growth_mib < RSS_GROWTH_BOUND_MIB
        assert await wait_until(lambda: not tagged_processes(tag), timeout=10)
        worker.signal(signal.SIGTERM)
        assert worker.wait(60) == 0, worker.text()
    finally:
        if worker is not None:
            worker.kill()


async def test_docker_memory_hog_and_fork_bomb_beside_healthy(chaos_server, chaos_client, tmp_path):
    api, why = docker_api()
    if api is None:
        pytest.skip(why)
    tag = new_tag()
    in_box = ["python3", f"{MOUNT}/{HARNESS.name}"]
    specs = {
        "hog": _spec("hog", [*in_box, "hog", f"tag={tag}"], harness=_docker(memory="64m")),
        "bomb": _spec("bomb", [*in_box, "fork-bomb", f"tag={tag}"], harness=_docker(pids_limit=64)),
        "filler": _spec(
            "filler", [*in_box, "fill", f"tag={tag}"], harness=_docker(limits={"disk": "32m"})
        ),
        "healthy-box": _spec("healthybox", [*in_box, "log", "delay=0.2"], harness=_docker()),
        "healthy": _spec("healthy", ["{python}", str(HARNESS), "log", "delay=0.2", f"tag={tag}"]),
    }
    print("\nhostile (docker):")
    worker = None
    try:
        out, rss, worker = await _run_beside(chaos_server, chaos_client, tmp_path, specs, tag)
        # The engine's cgroup OOM-kills the hog; the pids limit holds the bomb (its
        # turn times out, and the engine's count says why); the filler fills /tmp.
        _assert_limit(out["hog"], "memory")
        _assert_limit(out["bomb"], "process")
        _assert_limit(out["filler"], "disk")
        assert out["healthy-box"].termination == out["healthy"].termination == "env_done"
        assert all(r.reward == 1.0 for k, r in out.items() if k.startswith("healthy"))
        assert rss.growth_mib < RSS_GROWTH_BOUND_MIB
        # Released episodes remove their containers; the engine is asked, by label.
        assert await wait_until(lambda: not containers_of(api, worker.worker_id), timeout=30)
        worker.signal(signal.SIGTERM)
        assert worker.wait(60) == 0, worker.text()
        assert containers_of(api, worker.worker_id) == []
        assert await wait_until(lambda: not tagged_processes(tag), timeout=10)
    finally:
        if worker is not None:
            worker.kill()


async def test_sandbox_memory_hog_fork_bomb_and_disk_filler_beside_healthy(
    chaos_server, chaos_client, tmp_path
):
    """The default runtime: each hostile box is ended at its limit within seconds (not
    at its turn timeout), naming it; the healthy episodes beside them are untouched;
    the worker leaves no process, directory or cgroup behind."""
    tag = new_tag()
    small = {"memory": "64m", "processes": 32, "disk": "32m"}

    def hostile(kind: str, mode: str) -> EpisodeSpec:
        command = ["{python}", str(HARNESS), mode, f"tag={tag}"]
        return _spec(kind, command, harness={"runtime": {"type": "subprocess", "limits": small}})

    echo = ["{python}", str(HARNESS), "log", "delay=0.2", f"tag={tag}"]
    specs = {
        "hog": hostile("hog", "hog"),
        "bomb": hostile("bomb", "fork-bomb"),
        "filler": hostile("filler", "fill"),
        "healthy-1": _spec("healthy1", echo),
        "healthy-2": _spec("healthy2", echo),
    }
    if not cgroup.available() and os.geteuid() == 0:
        # RLIMIT_NPROC does not bind uid 0: a root worker without a cgroup cannot hold a
        # fork bomb (docs/containment.md), and it would starve every other test of pids.
        del specs["bomb"]
    print("\nhostile (sandbox):")
    worker = None
    try:
        out, rss, worker = await _run_beside(chaos_server, chaos_client, tmp_path, specs, tag)
        if cgroup.available():  # the box's cgroup OOM-kills it
            _assert_limit(out["hog"], "memory")
        else:  # RLIMIT_DATA: its allocation fails, and it dies of that
            assert out["hog"].termination == "harness_crashed", out["hog"]
            assert "MemoryError" in (out["hog"].error or ""), out["hog"]
        if "bomb" in out:
            _assert_limit(out["bomb"], "process")
        _assert_limit(out["filler"], "disk")
        for kind in ("hog", "bomb", "filler") if "bomb" in out else ("hog", "filler"):
            assert out[kind].turns == 2, out[kind]  # turn 1 ended by the limit, not later
        assert out["healthy-1"].termination == out["healthy-2"].termination == "env_done"
        assert all(r.reward == 1.0 for k, r in out.items() if k.startswith("healthy"))
        assert rss.growth_mib < RSS_GROWTH_BOUND_MIB
        assert await wait_until(lambda: not tagged_processes(tag), timeout=10)
        worker.signal(signal.SIGTERM)
        assert worker.wait(60) == 0, worker.text()
        left = [p for p in Path(tempfile.gettempdir()).glob(f"episodes-box-{worker.pid}-*")]
        left += [d for p in cgroup.parents() for d in p.glob(f"{cgroup.PREFIX}{worker.pid}-*")]
        assert left == []
    finally:
        if worker is not None:
            worker.kill()


FLOODER = HARNESS.parent / "flood_harness.py"


@pytest.mark.parametrize("runtime", ["sandbox", "docker"])
async def test_proxy_flood_beside_a_healthy_model_episode(
    chaos_server, chaos_client, tmp_path, runtime
):
    # Issue 28: one harness opens hundreds of connections to its model proxy and pushes
    # tokenless 60 MiB bodies at it. Before, the proxy read every body whole (six took a
    # worker from 52 to 828 MB) and held every connection for good.
    from episodes.model.scripted.server import ScriptedUpstream, kv_policy
    from episodes.types.spec import parse_spec

    box: dict[str, Any] = {}
    if runtime == "docker":
        api, why = docker_api()
        if api is None:
            pytest.skip(why)
        box = {"harness": _docker()}
    tag = new_tag()
    async with ScriptedUpstream(policy=kv_policy) as upstream:
        model = {"base_url": upstream.base_url, "model": "scripted"}
        where = ["python3", f"{MOUNT}/{FLOODER.name}"] if box else ["{python}", str(FLOODER)]
        flooder = [*where, "idle=300", "bodies=8", f"tag={tag}"]
        echo = ["{python}", str(HARNESS), "log", "delay=0.2", f"tag={tag}"]
        agent = parse_spec(
            {
                "name": f"kv-{uuid.uuid4().hex[:6]}",
                "env": "kv-store",
                "tasks": [{"id": "ab", "data": {"goal": {"a": "1", "b": "2"}}}],
                "max_turns": 4,
                "harness": {"command": "{python} -m episodes.harness.reference.llm --max-steps 8"},
                "model": model,
            }
        )
        specs = {
            "flood": _spec("flood", flooder, n_turns=2, model=model, **box),
            "healthy-model": agent,
            "healthy": _spec("healthy", echo),
        }
        print(f"\nhostile (proxy flood, {runtime}):")
        worker = None
        try:
            out, rss, worker = await _run_beside(chaos_server, chaos_client, tmp_path, specs, tag)
            # A named outcome for the flooder (its proxy refused it; it echoed on).
            assert out["flood"].termination in ("env_done", "turn_timeout"), out["flood"]
            assert out["healthy-model"].termination == "env_done", out["healthy-model"]
            assert out["healthy-model"].reward == 1.0
            assert out["healthy"].termination == "env_done"
            # Eight 60 MiB bodies never read: the worker holds none of them.
            assert rss.growth_mib < RSS_GROWTH_BOUND_MIB
            assert await wait_until(lambda: not tagged_processes(tag), timeout=30)
            worker.signal(signal.SIGTERM)
            assert worker.wait(60) == 0, worker.text()
        finally:
            if worker is not None:
                worker.kill()
