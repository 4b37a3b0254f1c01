"""Persistent vs respawn: one live harness process vs a fresh process per turn.

The respawn strategy is what a harness without a live process must do each turn:
launch the harness, wait for `ready`, replay the turns so far (its state), then send
the new turn. Measured for a harness with realistic imports (bench/harnesses/
realistic.py) and, for reference, the minimal echo harness. Per-turn figure: host
wall time from "send turn n" to its reply (respawn: launch + replay + turn n).
Temporal-free: this isolates the process strategy.
"""

from __future__ import annotations

import statistics
import time
import uuid

from bench.common import ECHO, REALISTIC, fmt_spread, load, ratio, script_spec, spread, table
from episodes.session.live import LiveSession


async def _persistent(command: list[str], turns: int) -> list[float]:
    spec = script_spec(turns, command, name="persistent")
    session = LiveSession(spec, spec.tasks[0], 0, f"p-{uuid.uuid4().hex[:8]}")
    out = []
    try:
        await session.open()
        for n in range(turns):
            t0 = time.perf_counter()
            await session.turn(n)
            out.append((time.perf_counter() - t0) * 1000)
    finally:
        await session.close()
    return out


async def _respawn(command: list[str], turns: int) -> list[float]:
    spec = script_spec(turns, command, name="respawn")
    out = []
    for n in range(turns):
        session = LiveSession(spec, spec.tasks[0], 0, f"r-{uuid.uuid4().hex[:8]}")
        try:
            t0 = time.perf_counter()
            await session.open()
            for i in range(n + 1):  # replay 0..n-1, then turn n
                await session.turn(i)
            out.append((time.perf_counter() - t0) * 1000)
        finally:
            await session.close()
    return out


async def run(quick: bool = False, repeats: int | None = None) -> dict:
    repeats = repeats or (1 if quick else 3)
    persistent_turns = 10 if quick else 50
    respawn_turns = 2 if quick else 8
    harnesses = {"realistic": REALISTIC, "echo": ECHO}
    samples: dict[str, dict[str, list[float]]] = {h: {} for h in harnesses}
    load_start = load()
    for _ in range(repeats):
        for name, command in harnesses.items():
            row = samples[name]
            row.setdefault("persistent", []).append(
                statistics.median(await _persistent(command, persistent_turns))
            )
            row.setdefault("respawn", []).append(
                statistics.median(await _respawn(command, respawn_turns))
            )
    figures = {h: {k: spread(v) for k, v in row.items()} for h, row in samples.items()}
    ratios = {
        h: ratio(f["respawn"]["median"], f["persistent"]["median"]) for h, f in figures.items()
    }
    print(
        f"persistent vs respawn: per-turn ms, median [min..max] over {repeats} repeat(s) "
        f"({persistent_turns} persistent turns; respawn turns 0..{respawn_turns - 1})"
    )
    rows = [
        [
            name,
            fmt_spread(f["persistent"], " ms", 3),
            fmt_spread(f["respawn"], " ms", 1),
            f"{ratios[name]:.0f}x",
        ]
        for name, f in figures.items()
    ]
    print(table(rows, ["harness", "persistent", "respawn (launch+replay)", "respawn/persistent"]))
    return {
        "repeats": repeats,
        "persistent_turns": persistent_turns,
        "respawn_turns": respawn_turns,
        "load": [load_start, load()],
        "figures": figures,
        "ratios": ratios,
    }
