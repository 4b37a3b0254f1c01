"""`episodes doctor` on healthy and broken configurations; `episodes setup` fixes a bare server."""

from __future__ import annotations

import uuid

import pytest

from tests.support.worker_procs import episodes

pytestmark = pytest.mark.slow


async def test_healthy_configuration_exits_0(dev_server, worker) -> None:
    code, out, err = await episodes(
        "doctor", "--address", dev_server.address, "--task-queue", "episodes-test"
    )
    assert code == 0, out + err
    for line in ("✓ server", "✓ namespace", "✓ search attributes: all 10", "✓ workers: 1 polling"):
        assert line in out
    # The embedded dev server turns fairness on (issue 31).
    assert "✓ priority: the server serves priority 1 before 5" in out, out
    assert "✓ fairness: the server shares a queue between fairness keys" in out
    assert worker.worker_id in out
    assert "everything needed is there" in out


async def test_wrong_port_names_the_server(tmp_path) -> None:
    code, out, err = await episodes("doctor", "--address", "127.0.0.1:1")
    assert code == 1, out + err
    assert "✗ server: cannot reach 127.0.0.1:1: connection refused" in out
    assert "1 problem(s): server" in out and "Traceback" not in out + err


async def test_no_worker_on_the_queue(dev_server) -> None:
    queue = f"nobody-{uuid.uuid4().hex[:6]}"
    code, out, _ = await episodes("doctor", "--address", dev_server.address, "--task-queue", queue)
    assert code == 1
    assert f"✗ workers: no worker polls queue {queue!r}" in out
    assert "1 problem(s): workers" in out


async def test_required_runtime_and_blob_store(dev_server, worker, tmp_path) -> None:
    ro = tmp_path / "a-file"  # a directory under a file: cannot be created (even as root)
    ro.write_text("")
    code, out, _ = await episodes(
        "doctor",
        "--address",
        dev_server.address,
        "--task-queue",
        "episodes-test",
        "--runtime",
        "modal",
        EPISODES_PAYLOADS_STORAGE="local",
        EPISODES_PAYLOADS_PATH=str(ro / "blobs"),
        MODAL_TOKEN_ID="",
        MODAL_TOKEN_SECRET="",
        HOME=str(tmp_path),
    )
    assert code == 1
    assert "✗ runtime modal" in out and "✗ blob store: local" in out
    ok = tmp_path / "blobs"
    code, out, _ = await episodes(
        "doctor",
        "--address",
        dev_server.address,
        "--task-queue",
        "episodes-test",
        EPISODES_PAYLOADS_STORAGE="local",
        EPISODES_PAYLOADS_PATH=str(ok),
    )
    assert code == 0, out
    assert f"✓ blob store: local {ok} writable" in out


async def test_bare_server_missing_search_attributes_then_setup(tmp_path) -> None:
    from episodes.client.devserver import DevServer

    server = DevServer(
        auto_port=True,
        headless=True,
        db_file=None,
        log_file=tmp_path / "bare.log",
        search_attributes=False,
    )
    server.start()
    try:
        code, out, _ = await episodes("doctor", "--address", server.address)
        assert code == 1
        assert "✗ search attributes: missing EpisodeEnv" in out
        assert "✗ workers: no worker polls queue 'episodes'" in out
        assert "2 problem(s): search attributes, workers" in out

        code, out, err = await episodes("setup", "--address", server.address)
        assert code == 0, out + err
        assert "registered search attributes EpisodeEnv" in out
        code, out, _ = await episodes("setup", "--address", server.address)
        assert code == 0 and "nothing to do" in out

        code, out, _ = await episodes("doctor", "--address", server.address, "--no-workers")
        assert code == 0, out
        assert "✓ search attributes: all 10 registered" in out
    finally:
        server.stop()
