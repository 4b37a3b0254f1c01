"""The worker side of `bench.agents_scale`'s proxy part, as its own process.

    PYTHONPATH=<a checkout> python bench/scale_worker.py    # a script: imports only episodes

Run as a script (not `-m bench...`) so that `episodes` comes from whichever checkout
PYTHONPATH names: the benchmark runs one of these for the code under test and, when
asked (BENCH_PROXY_BASELINE), one for another checkout, and alternates their calls
in one run, under the same load. Reads `{"sessions": n, "base_url": url,
"token_data": bool, "stream_base_url": url}` on stdin, starts n sessions'
`AgentServices` on `base_url` (`model.token_data` as given) and, with
`stream_base_url`, n more on that one (each its own proxy and token; every call
recorded), prints `{"targets": [[base_url, token], ...], "stream_targets": [...]}`;
then answers each line:
`cpu` with its CPU seconds (user + system) and those spent collecting garbage
(with BENCH_GC_STATS=1), `stop` with the number of calls recorded
(after stopping every session).
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

_gc = {"s": 0.0, "t0": 0.0}


def _gc_timer(phase: str, info: dict) -> None:
    """The garbage collector's share of the worker's time (it runs inside allocations:
    a profile shows it as whatever allocated)."""
    if phase == "start":
        _gc["t0"] = time.process_time()
    else:
        _gc["s"] += time.process_time() - _gc["t0"]


async def main() -> None:
    if os.environ.get("BENCH_GC_STATS"):  # costs ~1 us a collection: only when asked
        gc.callbacks.append(_gc_timer)
    import episodes
    from episodes.runtimes.subprocess import SubprocessRuntime
    from episodes.session.services import AgentServices
    from episodes.types.model import ModelSpec

    # As `episodes worker` does once started; a checkout from before it did runs untuned
    # (asked of its tree: an editable install may resolve `workers` to another).
    if Path(episodes.__file__).parent.parent.joinpath("workers", "collector.py").exists():
        from workers.collector import tune_collector

        tune_collector()
    job = json.loads(sys.stdin.readline())
    n = job["sessions"]
    spec = ModelSpec(base_url=job["base_url"], model="m", token_data=job.get("token_data", False))
    runtime = SubprocessRuntime()
    await runtime.start()
    services = [AgentServices(None, spec, session_id=f"s{i}") for i in range(n)]
    if job.get("stream_base_url"):
        streams = ModelSpec(base_url=job["stream_base_url"], model="m")
        services += [AgentServices(None, streams, session_id=f"t{i}") for i in range(n)]
    recorded: list[list[Any]] = []
    for s in services:
        await s.start(runtime)
        recorded.append([])
        s.begin_turn(recorded[-1])
    targets = [
        (s.harness_env["OPENAI_BASE_URL"], s.harness_env["OPENAI_API_KEY"]) for s in services
    ]
    print(json.dumps({"targets": targets[:n], "stream_targets": targets[n:]}), flush=True)
    loop = asyncio.get_running_loop()
    while True:
        line = (await loop.run_in_executor(None, sys.stdin.readline)).strip()
        if line == "cpu":
            print(json.dumps({"cpu_s": time.process_time(), "gc_s": _gc["s"]}), flush=True)
        else:  # "stop", or the benchmark went away
            break
    for s in services:
        await s.stop()
    await runtime.stop()
    print(json.dumps({"recorded": sum(len(r) for r in recorded)}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
