"""NativeDriver against real harness processes that behave, and that misbehave on purpose."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest

from episodes.errors import HarnessStartFailed
from episodes.harness import NativeDriver
from episodes.runtimes.subprocess import SubprocessRuntime
from tests.support.procs import (
    PeakRss,
    assert_group_gone,
    assert_pids_gone,
    descendants,
    pid_running,
    scripted,
)

FAST = {"ready_timeout_s": 5.0, "stop_timeout_s": 1.0}


def session(runtime, mode: str, *opts: str, **kwargs) -> NativeDriver:
    return NativeDriver(runtime, scripted(mode, *opts), **{**FAST, **kwargs})


async def test_echo_turns_and_clean_stop(runtime):
    s = session(runtime, "echo")
    await s.start()
    assert s.alive and s.pid is not None and s.returncode is None
    first = await s.turn(1, {"text": "hi", "n": [1, 2]}, timeout_s=5)
    second = await s.turn(2, "again", timeout_s=5)
    assert first.reply == {"text": "hi", "n": [1, 2]} and first.error is None
    assert (second.turn, second.message, second.reply) == (2, "again", "again")
    assert first.duration_ms > 0 and first.events == []
    await s.stop()
    assert not s.alive
    assert s.returncode == 0  # it obeyed `shutdown`, no signal was needed
    assert_group_gone(s.pid)


async def test_events_stream_to_sync_and_async_callbacks(runtime):
    s = session(runtime, "events", "n=5")
    await s.start()
    seen_async: list = []

    async def on_event_async(event):
        await asyncio.sleep(0)
        seen_async.append(event)

    record = await s.turn(1, "go", timeout_s=5, on_event=on_event_async)
    assert record.events == [{"i": i, "turn": 1} for i in range(5)]
    assert seen_async == record.events and record.reply == "go"
    seen_sync: list = []
    record = await s.turn(2, "again", timeout_s=5, on_event=seen_sync.append)
    assert seen_sync == [{"i": i, "turn": 2} for i in range(5)]
    await s.stop()
    assert_group_gone(s.pid)


async def test_a_burst_of_events_decoded_ahead_arrives_whole_and_in_order(runtime):
    # 3,000 small events: most reads carry dozens of packets, which the driver hands
    # out without reading again (the decoded-ahead path); none lost, none reordered.
    s = session(runtime, "events", "n=3000")
    await s.start()
    seen: list = []
    for turn in (1, 2):
        record = await s.turn(turn, "go", timeout_s=30, on_event=seen.append)
        assert record.events == [{"i": i, "turn": turn} for i in range(3000)]
        assert record.reply == "go"
    assert seen == [{"i": i, "turn": t} for t in (1, 2) for i in range(3000)]
    await s.stop()


async def test_error_packet_keeps_the_harness_usable(runtime):
    s = session(runtime, "error-reply", "turn=1")
    await s.start()
    record = await s.turn(1, "x", timeout_s=5)
    assert record.error_type == "harness_error" and record.reply is None
    assert "ValueError: scripted failure at turn 1" in record.error
    assert s.alive
    assert (await s.turn(2, "y", timeout_s=5)).reply == "y"
    await s.stop()
    assert_group_gone(s.pid)


# mode + options, the turn at which it misbehaves, error_type, text the error must contain
FAILURES = [
    (("crash-mid", "turn=2"), 2, "harness_crashed", "crash-mid: fatal error at turn 2"),
    (("hang", "turn=1"), 1, "turn_timeout", "no reply to turn 1 within 1 s"),
    (("garbage", "kind=text"), 1, "protocol_error", "is the harness printing to stdout?"),
    (("garbage", "kind=frame"), 1, "protocol_error", "not JSON"),
    (("oversize",), 1, "protocol_error", "packet of 1099511627776 bytes exceeds the maximum"),
    (("truncate",), 1, "protocol_error", "mid-packet"),
    (("wrong-turn",), 1, "protocol_error", "'reply' packet for turn 2 during turn 1"),
    # 5,000 levels: Python's parser would raise RecursionError, not a protocol error.
    (("deep", "what=reply"), 1, "protocol_error", "deeper than 128 levels"),
    (("deep", "what=event"), 1, "protocol_error", "deeper than 128 levels"),
    # The grandchild keeps stdout open: the crash must be noticed by the exit, not by EOF.
    (("fork-grandchild", "then=crash"), 1, "harness_crashed", "(exit code 7)"),
    (("fork-grandchild", "then=hang"), 1, "turn_timeout", "within 1 s"),
]


@pytest.mark.parametrize(
    ("argv", "bad_turn", "error_type", "needle"), FAILURES, ids=["-".join(f[0]) for f in FAILURES]
)
async def test_misbehaving_harness_becomes_a_record(runtime, argv, bad_turn, error_type, needle):
    s = session(runtime, *argv)
    await s.start()
    family = [s.pid, *descendants(s.pid)]
    for n in range(1, bad_turn):
        assert (await s.turn(n, n, timeout_s=5)).reply == n
    # Only the hang modes may use the timeout: everything else must be detected by itself.
    timeout = 1.0 if error_type == "turn_timeout" else 30.0
    started = time.monotonic()
    record = await s.turn(bad_turn, "boom", timeout_s=timeout)
    assert time.monotonic() - started < 15, "failure took too long to detect"
    assert record.error_type == error_type, record.error
    assert needle in record.error
    assert record.reply is None
    assert not s.alive and s.returncode is not None
    assert_group_gone(s.pid)
    assert_pids_gone(family)
    with pytest.raises(RuntimeError, match="unusable"):
        await s.turn(bad_turn + 1, "more", timeout_s=1)
    await s.stop()  # harmless after the session stopped itself


async def test_crash_reports_exit_code_and_stderr(runtime):
    s = session(runtime, "crash-mid", "turn=1")
    await s.start()
    record = await s.turn(1, "x", timeout_s=5)
    assert s.returncode == 7
    assert "exited during turn 1 (exit code 7)" in record.error
    assert "--- harness stderr (tail) ---" in record.error


async def test_harness_killed_between_turns_is_a_crash(runtime):
    s = session(runtime, "echo")
    await s.start()
    assert (await s.turn(1, 1, timeout_s=5)).reply == 1
    os.kill(s.pid, signal.SIGKILL)
    record = await s.turn(2, 2, timeout_s=5)
    assert record.error_type == "harness_crashed"
    assert "exited during turn 2, killed by SIGKILL (exit code -9)" in record.error
    assert_group_gone(s.pid)


@pytest.mark.parametrize("kind", ["raw", "framed"])
async def test_stdout_flood_is_a_protocol_error_without_memory_growth(runtime, kind):
    s = session(runtime, "stdout-flood", "mb=300", f"kind={kind}")
    await s.start()
    with PeakRss() as rss:
        record = await s.turn(1, "x", timeout_s=30)
    assert record.error_type == "protocol_error", record.error
    assert rss.growth_mib < 64, f"memory grew by {rss.growth_mib:.0f} MiB"
    assert_group_gone(s.pid)


async def test_stderr_flood_keeps_working_and_only_the_tail(runtime):
    s = session(runtime, "stderr-flood", "mb=200", stderr_tail_bytes=4096)
    await s.start()
    with PeakRss() as rss:
        for n in (1, 2):
            record = await s.turn(n, n, timeout_s=30)
            assert record.reply == n and record.error is None
    # The drain task may lag the reply by a moment: wait for the final line.
    assert await _eventually(lambda: s.stderr_tail.endswith("done with turn 2\n"))
    assert len(s.stderr_tail.encode()) <= 4096
    assert rss.growth_mib < 64, f"memory grew by {rss.growth_mib:.0f} MiB"
    await s.stop()
    assert_group_gone(s.pid)


async def _eventually(predicate, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return predicate()


async def test_stray_prints_do_not_corrupt_the_protocol(runtime):
    s = session(runtime, "stray-print")
    await s.start()
    for n in (1, 2):
        assert (await s.turn(n, n, timeout_s=5)).reply == n
    assert await _eventually(lambda: "stray child output" in s.stderr_tail)
    assert "stray print from the harness" in s.stderr_tail
    await s.stop()


async def test_sigterm_ignoring_harness_is_killed(runtime):
    s = session(runtime, "ignore-sigterm")
    await s.start()
    assert (await s.turn(1, "x", timeout_s=5)).reply == "x"
    await s.stop()
    assert s.returncode == -signal.SIGKILL
    assert_group_gone(s.pid)


async def test_grandchild_is_killed_with_the_group(runtime):
    s = session(runtime, "fork-grandchild")
    await s.start()
    grandchildren = descendants(s.pid)
    assert grandchildren and all(pid_running(p) for p in grandchildren)
    assert (await s.turn(1, "x", timeout_s=5)).reply == "x"
    await s.stop()
    assert s.returncode == 0
    assert_pids_gone(grandchildren)
    assert_group_gone(s.pid)


async def test_env_is_an_allowlist(runtime, monkeypatch):
    monkeypatch.setenv("SECRET_TOKEN", "do-not-leak")
    s = session(runtime, "env", env={"ONLY_THIS": "1"})
    await s.start()
    seen = (await s.turn(1, None, timeout_s=5)).reply
    assert "SECRET_TOKEN" not in seen and seen["ONLY_THIS"] == "1"
    assert seen["PATH"] == "/usr/local/bin:/usr/bin:/bin"  # the documented minimal PATH
    await s.stop()
    s = session(runtime, "env", env={"SECRET_TOKEN": "passed on purpose", "PATH": "/bin"})
    await s.start()
    seen = (await s.turn(1, None, timeout_s=5)).reply
    assert seen["SECRET_TOKEN"] == "passed on purpose" and seen["PATH"] == "/bin"
    await s.stop()


# -- start failures ----------------------------------------------------------------------


async def test_never_ready_fails_start_with_stderr(runtime):
    s = session(runtime, "never-ready", ready_timeout_s=1.0)
    with pytest.raises(HarnessStartFailed, match="no 'ready' within 1 s") as info:
        await s.start()
    assert "never-ready: not saying ready" in info.value.stderr_tail
    assert info.value.error_type == "harness_start_failed"
    assert not s.alive
    assert_group_gone(s.pid)


async def test_exit_before_ready_carries_exit_code(runtime):
    s = session(runtime, "exit-now")
    with pytest.raises(HarnessStartFailed, match="exited before it sent 'ready'") as info:
        await s.start()
    assert info.value.exit_code == 3
    assert "cannot load the model config" in info.value.stderr_tail
    assert "cannot load the model config" in str(info.value)
    # The first line, which summaries show, quotes the stderr line naming the cause.
    first = str(info.value).splitlines()[0]
    assert first.startswith("harness exited before it sent 'ready' (exit code 3): "), first
    assert "cannot load the model config" in first
    assert_group_gone(s.pid)


async def test_a_missing_module_is_named_on_the_first_line(runtime):
    s = NativeDriver(runtime, [sys.executable, "-c", "import requestsx"], **FAST)
    with pytest.raises(HarnessStartFailed) as info:
        await s.start()
    first = str(info.value).splitlines()[0]
    assert first == (
        "harness exited before it sent 'ready' (exit code 1): "
        "ModuleNotFoundError: No module named 'requestsx'"
    )


async def test_protocol_error_before_ready(runtime):
    argv = [
        sys.executable,
        "-c",
        "print('hello, I am not a packet', flush=True); import time; time.sleep(60)",
    ]
    s = NativeDriver(runtime, argv, **FAST)
    with pytest.raises(HarnessStartFailed, match="protocol error before 'ready'"):
        await s.start()
    assert_group_gone(s.pid)


async def test_missing_executable_fails_start(runtime):
    s = NativeDriver(runtime, ["/nonexistent/harness"], **FAST)
    with pytest.raises(HarnessStartFailed, match="could not start harness"):
        await s.start()
    await s.stop()


async def test_slow_start_within_the_timeout(runtime):
    s = session(runtime, "slow-start", "delay=0.5", ready_timeout_s=10.0)
    await s.start()
    assert (await s.turn(1, 1, timeout_s=5)).reply == 1
    await s.stop()


# -- misuse ------------------------------------------------------------------------------


async def test_misuse_raises(runtime):
    s = session(runtime, "echo")
    with pytest.raises(RuntimeError, match="before a successful start"):
        await s.turn(1, "x", timeout_s=1)
    await s.start()
    with pytest.raises(RuntimeError, match="already called"):
        await s.start()
    await s.turn(3, "x", timeout_s=5)
    with pytest.raises(RuntimeError, match="must increase: got 3 after 3"):
        await s.turn(3, "x", timeout_s=5)
    with pytest.raises(RuntimeError, match="must increase"):
        await s.turn(2, "x", timeout_s=5)
    with pytest.raises(ValueError):
        await s.turn(4, float("nan"), timeout_s=5)  # not JSON: the caller's bug
    assert (await s.turn(4, "ok", timeout_s=5)).reply == "ok"
    await s.stop()
    with pytest.raises(RuntimeError, match="stopped"):
        await s.turn(5, "x", timeout_s=5)


async def test_concurrent_turns_are_refused(runtime):
    s = session(runtime, "hang", "turn=1")
    await s.start()
    first = asyncio.create_task(s.turn(1, "x", timeout_s=30))
    await asyncio.sleep(0.1)
    with pytest.raises(RuntimeError, match="in progress"):
        await s.turn(2, "y", timeout_s=1)
    await s.stop()
    record = await first
    assert record.error_type == "harness_crashed"
    assert_group_gone(s.pid)


# -- stop from every state ---------------------------------------------------------------


async def test_stop_never_started_and_twice(runtime):
    s = session(runtime, "echo")
    await s.stop()
    await s.stop()
    assert not s.alive and s.pid is None


async def test_stop_after_start_twice(runtime):
    s = session(runtime, "echo")
    await s.start()
    await s.stop()
    await s.stop()
    assert s.returncode == 0
    assert_group_gone(s.pid)


async def test_stop_mid_start(runtime):
    s = session(runtime, "slow-start", "delay=60", ready_timeout_s=30.0)
    starting = asyncio.create_task(s.start())
    assert await _eventually(lambda: s.pid is not None)
    await s.stop()
    with pytest.raises(HarnessStartFailed, match="stopped before it became ready"):
        await starting
    assert_group_gone(s.pid)


class GatedRuntime(SubprocessRuntime):
    """A real subprocess runtime whose open_process waits for the test to open a gate."""

    def __init__(self) -> None:
        super().__init__()
        self.entered, self.gate = asyncio.Event(), asyncio.Event()

    async def open_process(self, argv, env=None, cwd=None):
        self.entered.set()
        await self.gate.wait()
        return await super().open_process(argv, env, cwd)


async def test_stop_while_the_process_is_being_opened():
    rt = GatedRuntime()
    await rt.start()
    try:
        s = NativeDriver(rt, scripted("echo"), **FAST)
        starting = asyncio.create_task(s.start())
        await rt.entered.wait()
        await s.stop()  # nothing to stop yet
        rt.gate.set()
        with pytest.raises(HarnessStartFailed, match="stopped before it became ready"):
            await starting
        assert s.pid is not None and s.returncode is not None and not s.alive
        assert_group_gone(s.pid)
    finally:
        await rt.stop()


async def test_stop_mid_turn(runtime):
    s = session(runtime, "hang", "turn=1")
    await s.start()
    turning = asyncio.create_task(s.turn(1, "x", timeout_s=60))
    await asyncio.sleep(0.2)
    await s.stop()
    record = await turning
    assert record.error_type == "harness_crashed"
    assert s.returncode == -signal.SIGTERM
    assert_group_gone(s.pid)


async def test_stop_after_crash(runtime):
    s = session(runtime, "crash-mid", "turn=1")
    await s.start()
    await s.turn(1, "x", timeout_s=5)
    await s.stop()
    await s.stop()
    assert s.returncode == 7


async def test_cancelled_turn_then_stop(runtime):
    s = session(runtime, "hang", "turn=1")
    await s.start()
    turning = asyncio.create_task(s.turn(1, "x", timeout_s=60))
    await asyncio.sleep(0.2)
    turning.cancel()
    with pytest.raises(asyncio.CancelledError):
        await turning
    with pytest.raises(RuntimeError, match="interrupted"):
        await s.turn(2, "y", timeout_s=1)
    await s.stop()
    assert_group_gone(s.pid)


async def test_cancelled_stop_still_finishes(runtime):
    s = session(runtime, "ignore-sigterm")
    await s.start()
    stopping = asyncio.create_task(s.stop())
    await asyncio.sleep(0.1)
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    # The caller was cancelled, but the escalation ran to the end before it returned.
    assert s.returncode == -signal.SIGKILL
    assert_group_gone(s.pid)


async def test_the_documented_harness_without_the_sdk_works(runtime, tmp_path):
    doc = (Path(__file__).resolve().parents[3] / "docs" / "protocol.md").read_text()
    section = doc.split("## A harness in Python without the SDK", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    script = tmp_path / "raw_harness.py"
    script.write_text(code)
    s = NativeDriver(runtime, [sys.executable, str(script)], **FAST)
    await s.start()
    record = await s.turn(1, {"x": [1, 2]}, timeout_s=5)
    assert record.reply == {"x": [1, 2]} and record.events == [{"status": "thinking"}]
    await s.stop()
    assert s.returncode == 0
