"""Pool: a cold provision (start a fresh box) vs a warm lease (the parked box) per runtime.

Two levels, per runtime (subprocess, and Docker when an engine and the image
`episodes-harness:latest` are there):
- box: `RuntimePool.lease()` entered on an empty key (cold: the box starts) vs on a
  key whose box is parked (warm: config check + `alive()`);
- session: `LiveSession.open()` through the pool (box + harness `ready` + env reset),
  cold vs warm: what a `provision` activity costs with and without a parked box.
"""

from __future__ import annotations

import statistics
import time
import uuid

from bench.common import ECHO, fmt_spread, load, ratio, script_spec, spread, table
from episodes.runtimes.pool.runtime_pool import RuntimePool
from episodes.session.live import LiveSession
from episodes.types.runtime import DockerConfig, SubprocessConfig

BOX_ECHO = ["python3", "-m", "episodes.harness.reference.echo"]


def docker_skip_reason(image: str) -> str | None:
    try:
        import docker
    except ImportError:
        return "the docker SDK is not installed"
    try:
        client = docker.from_env(timeout=10)
        client.ping()
    except Exception as e:
        return f"no Docker engine answers ({type(e).__name__})"
    try:
        client.images.get(image)
    except Exception:
        return f"image {image} is missing (scripts/build-image.sh builds it)"
    return None


async def _timed_lease(pool: RuntimePool, key: str, config) -> float:  # type: ignore[no-untyped-def]
    lease = pool.lease(key, config, labels={"bench": "pool"})
    t0 = time.perf_counter()
    await lease.__aenter__()
    took = (time.perf_counter() - t0) * 1000
    await lease.__aexit__(None, None, None)  # park it
    return took


async def _timed_session(pool: RuntimePool, config, command: list[str]) -> float:  # type: ignore[no-untyped-def]
    spec = script_spec(
        1,
        command,
        name="pool",
        harness={"command": command, "runtime": config.model_dump()},
        reuse_key="{task.id}",
    )
    session = LiveSession(spec, spec.tasks[0], 0, f"pool-{uuid.uuid4().hex[:8]}", pool=pool)
    t0 = time.perf_counter()
    try:
        await session.open()
        took = (time.perf_counter() - t0) * 1000
        await session.turn(0)
    finally:
        await session.close()
    return took


async def _measure(config, command: list[str], repeats: int) -> dict:  # type: ignore[no-untyped-def]
    out: dict[str, list[float]] = {}
    async with RuntimePool() as pool:
        for _ in range(repeats):
            key = f"bench-{uuid.uuid4().hex[:8]}"
            out.setdefault("box_cold_ms", []).append(await _timed_lease(pool, key, config))
            warm = [await _timed_lease(pool, key, config) for _ in range(5)]
            out.setdefault("box_warm_ms", []).append(statistics.median(warm))
            await pool.discard(key)
        for _ in range(repeats):
            # A fresh pool per cold session: the box under the task's key must be absent.
            async with RuntimePool() as fresh:
                out.setdefault("session_cold_ms", []).append(
                    await _timed_session(fresh, config, command)
                )
                out.setdefault("session_warm_ms", []).append(
                    await _timed_session(fresh, config, command)
                )
    return {k: spread(v) for k, v in out.items()}


async def run(quick: bool = False, repeats: int | None = None) -> dict:
    repeats = repeats or (1 if quick else 5)
    load_start = load()
    runtimes = {"subprocess": (SubprocessConfig(), ECHO)}
    skipped = {}
    docker_config = DockerConfig()
    reason = docker_skip_reason(docker_config.image)
    if reason is None:
        runtimes["docker"] = (docker_config, BOX_ECHO)
    else:
        skipped["docker"] = reason
    figures = {name: await _measure(cfg, cmd, repeats) for name, (cfg, cmd) in runtimes.items()}
    ratios = {}
    for name, f in figures.items():
        ratios[f"{name}_box_cold_vs_warm"] = ratio(
            f["box_cold_ms"]["median"], f["box_warm_ms"]["median"]
        )
        ratios[f"{name}_session_cold_vs_warm"] = ratio(
            f["session_cold_ms"]["median"], f["session_warm_ms"]["median"]
        )
    print(f"pool: cold provision vs warm lease, {repeats} repeat(s), median [min..max]")
    rows = []
    for name, f in figures.items():
        rows.append(
            [
                name,
                fmt_spread(f["box_cold_ms"], " ms", 1),
                fmt_spread(f["box_warm_ms"], " ms", 3),
                f"{ratios[f'{name}_box_cold_vs_warm']:.0f}x",
                fmt_spread(f["session_cold_ms"], " ms", 0),
                fmt_spread(f["session_warm_ms"], " ms", 0),
                f"{ratios[f'{name}_session_cold_vs_warm']:.1f}x",
            ]
        )
    print(
        table(
            rows,
            [
                "runtime",
                "box cold",
                "box warm",
                "cold/warm",
                "session cold",
                "session warm",
                "cold/warm",
            ],
        )
    )
    for name, why in skipped.items():
        print(f"  {name}: skipped: {why}")
    return {
        "repeats": repeats,
        "load": [load_start, load()],
        "figures": figures,
        "ratios": ratios,
        "skipped": skipped,
    }
