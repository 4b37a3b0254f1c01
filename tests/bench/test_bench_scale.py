"""The scale benchmark (issue 44 §6) runs at tiny sizes, and its figures are computed
from the stamps as the report says. Shapes only, never timings."""

from __future__ import annotations

import pytest

from bench import scale


def _episode(box_ns: int, start_ns: int, turns: list[tuple[int, int]]) -> dict:
    return {
        "box_ns": box_ns,
        "reset_ns": start_ns + 1_000_000,
        "start_ns": start_ns,
        "worker_pid": 1,
        "harness_pid": 3,
        "turns": [list(t) for t in turns],
    }


def test_figures_from_the_stamps() -> None:
    """Turn latency is reply-out to next-turn-in, turn 0 -> 1 (the barrier) left out,
    and only turns that reached the harness before the first episode's last reply (all
    N still live) count; box start is box_config to the harness's first line."""
    ms = 1_000_000
    a = _episode(
        0,
        100 * ms,
        [(0, 0), (1000 * ms, 1001 * ms), (1003 * ms, 1004 * ms), (1010 * ms, 1011 * ms)],
    )
    b = _episode(
        0,
        300 * ms,
        [(0, 0), (1000 * ms, 1001 * ms), (1002 * ms, 1100 * ms), (2000 * ms, 2001 * ms)],
    )
    run = scale.Size(asked=2, live=2, ramp_s=1.0, idle_s=5.0, turns_s=2.0, results=[a, b])
    run.cpu = {
        "server_ramp": 0.2,
        "server_turns": 0.6,
        "workers_ramp": 0.1,
        "workers_turns": 0.3,
        "workers_idle": 0.02,
    }
    run.memory = {
        "worker_rss_base": 100 * scale.MIB,
        "worker_rss": 102 * scale.MIB,
        "box_pss": 6 * scale.MIB,
    }
    fig = scale.figures(scale.Settings(turns=4), run)
    # a: gaps 2 ms (turn 1 -> 2) and 6 ms (2 -> 3); b: 1 ms and 900 ms. a's last reply
    # left at 1011 ms: b's turn 3 came after it and is not "all live".
    assert fig["turn_ms_all"]["n"] == 4
    assert fig["turn_ms"]["n"] == 3 and fig["turn_ms"]["max"] == 6.0
    assert fig["box_start_ms"]["p50"] == 200.0 and fig["box_start_ms"]["max"] == 300.0
    assert fig["provision_ms"]["max"] == 301.0
    assert fig["worker_rss_per_session_mib"] == 1.0 and fig["box_pss_per_session_mib"] == 3.0
    assert fig["server_cpu_ms_per_episode"] == pytest.approx(400.0)
    assert fig["server_cpu_ms_per_turn"] == pytest.approx(100.0)  # 0.6 s over 2 x 3 turns
    assert fig["workers_idle_cpu_ms_per_session_s"] == pytest.approx(2.0)  # 20 ms / 2 / 5 s
    assert fig["sandboxed"] is True
    rat = scale.ratios({2: fig, 4: {**fig, "turn_ms": {"p50": 2 * fig["turn_ms"]["p50"]}}})
    assert rat["turn_ms.p50"] == 2.0 and rat["worker_rss_per_session_mib"] == 1.0
    assert "4/2" in scale.report({2: fig, 4: fig}, rat)


@pytest.mark.timeout(300)
async def test_scale_bench_runs_tiny() -> None:
    """2 worker processes, 4 then 8 live sandboxed episodes of 3 turns: every figure
    the report names is there for both sizes, and the ratios between them."""
    lines: list[str] = []
    settings = scale.Settings(sizes=(4, 8), workers=2, turns=3, think_ms=0, warmup=1, idle_s=1.0)
    result = await scale.measure(settings, say=lines.append)
    assert set(result["figures"]) == {"4", "8"}
    for n, fig in result["figures"].items():
        assert fig["sessions"] == int(n) and fig["stopped"] is None, fig
        assert fig["failed"] == 0, fig["failures"]
        assert sum(fig["per_worker_sessions"]) == int(n)
        assert fig["sandboxed"] is True  # the harness ran in its own pid namespace
        assert fig["box_start_ms"]["n"] == int(n) and fig["turn_ms"]["n"] >= 1
        assert fig["box_processes_per_session"] >= 1 and fig["worker_rss_mib"] > 0
    assert set(result["ratios"]) == {
        f"{key}.{sub}" if sub else key for _, key, sub, _, _ in scale.ROWS[1:]
    }
    assert any("8/4" in line for line in lines)
