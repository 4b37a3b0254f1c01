"""The replay-cost benchmark runs (tiny sizes), so it cannot rot unnoticed."""

from __future__ import annotations

from bench import replay_cost


async def test_replay_cost_bench_runs() -> None:
    result = await replay_cost.run(quick=True)
    assert {"live_plain", "replay_plain", "live_stream", "replay_stream"} <= set(result["figures"])
