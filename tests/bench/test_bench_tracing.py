"""The tracing benchmark runs (tiny sizes), in a process of its own: it installs a
global OpenTelemetry provider, which must not outlive it in the suite's processes."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def test_tracing_bench_runs() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.tracing", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    assert "off (shipped)" in done.stdout
    assert "spans written with traces on: 100 (one a turn)" in done.stdout, done.stdout
