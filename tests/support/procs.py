"""Checks on real processes, by pid and process group, that do not trust our own code."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import psutil

SCRIPTED = str(Path(__file__).parent / "harnesses" / "scripted_harness.py")


def scripted(mode: str, *opts: str) -> list[str]:
    """argv for the scripted harness (run by file path, no package import needed)."""
    return [sys.executable, SCRIPTED, mode, *opts]


def _running(proc: psutil.Process) -> bool:
    # A zombie has exited; it lingers only until someone reaps it. In this sandbox
    # PID 1 never reaps orphans, so killed grandchildren stay zombies forever.
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def pid_running(pid: int) -> bool:
    try:
        return _running(psutil.Process(pid))
    except psutil.NoSuchProcess:
        return False


def group_members(pgid: int) -> list[int]:
    """Pids of processes in group `pgid` that are still running (not zombies)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []
    members = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and _running(proc):
                members.append(proc.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return members


def wait_until(predicate, timeout_s: float = 10.0, interval_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return predicate()


def assert_group_gone(pgid: int | None, timeout_s: float = 5.0) -> None:
    """No running process is left in the group (bounded poll: SIGKILL lands asynchronously
    for members that are not our children, so a member may still be mid-exit)."""
    assert pgid is not None
    if not wait_until(lambda: not group_members(pgid), timeout_s):
        raise AssertionError(f"processes left in group {pgid}: {group_members(pgid)}")


def assert_pids_gone(pids: list[int], timeout_s: float = 5.0) -> None:
    if not wait_until(lambda: not any(pid_running(p) for p in pids), timeout_s):
        raise AssertionError(f"still running: {[p for p in pids if pid_running(p)]}")


def descendants(pid: int) -> list[int]:
    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


class PeakRss:
    """Samples this process's RSS from a thread (the event loop may be busy) and keeps the max."""

    def __init__(self, interval_s: float = 0.005) -> None:
        self._me = psutil.Process()
        self._interval = interval_s
        self._stop = threading.Event()
        self.baseline = self.peak = self._me.memory_info().rss
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._me.memory_info().rss)
            self._stop.wait(self._interval)

    @property
    def growth_mib(self) -> float:
        return (self.peak - self.baseline) / 2**20

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
