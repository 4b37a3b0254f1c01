"""The proxy overhead benchmark runs (tiny sizes), so it cannot rot unnoticed."""

from __future__ import annotations

from bench import proxy_overhead


async def test_proxy_overhead_bench_runs() -> None:
    result = await proxy_overhead.run(quick=True)
    assert set(result["overhead_ms"]) == {"plain", "stream"}
    # Every proxied call was recorded: warm-up + measured, plain and streamed.
    assert result["recorded"] == 2 * (1 + result["calls"])
