"""The replay-cost benchmark runs (tiny sizes), so it cannot rot unnoticed."""

from __future__ import annotations

from bench import replay_cost


async def test_replay_cost_bench_runs() -> None:
    result = await replay_cost.run(quick=True)
    assert {"live_plain", "replay_plain", "live_stream", "replay_stream"} <= set(result["figures"])
    # Beside it, a fork's box from a Docker commit (skipped, with why, without an engine).
    snapshot = result["fork_snapshot"]
    if "skipped" not in snapshot:
        for sized in snapshot["figures"].values():
            assert {"snapshot_path", "replay_path", "commit", "work"} <= set(sized)
