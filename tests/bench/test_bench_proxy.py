"""The agent benchmarks run (tiny sizes), so they cannot rot unnoticed."""

from __future__ import annotations

from bench import proxy_overhead


async def test_proxy_overhead_bench_runs() -> None:
    result = await proxy_overhead.run(quick=True)
    assert set(result["overhead_ms"]) == {"plain", "stream"}
    # Every proxied call was recorded: warm-up + measured, plain and streamed.
    assert result["recorded"] == 2 * (1 + result["calls"])


async def test_agent_overhead_bench_runs() -> None:
    from bench import agent_overhead

    result = await agent_overhead.run(quick=True)
    assert set(result["figures"]["tool_call"]) == {"bare", "bridge", "tunnel"}
    assert {"tool_call", "tool_call_tunnel"} <= set(result["overhead_ms"])
    assert result["figures"]["session_start_stop_ms"]["median"] > 0
