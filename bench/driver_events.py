"""Harness events: what the worker pays per `event` packet a harness streams.

Side by side in one run, per repeat:
- session: a `burst` harness (1,000 events a turn) driven in-process by `LiveSession`
  (the same driver and turn loop a worker runs); this process's CPU per event;
- decoder: the same packets, encoded once, fed to `PacketDecoder` in the 64 KiB reads
  the driver makes; CPU per event (the floor: validating and decoding, nothing else).
The ratio says how much of the driver's per-event cost is more than decoding.
"""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path

from bench.common import fmt_spread, load, ratio, spread, table
from episodes.harness.protocol import READ_CHUNK_BYTES, PacketDecoder, encode
from episodes.types.spec import EpisodeSpec

HERE = Path(__file__).resolve().parent
BURST = [sys.executable, str(HERE / "harnesses" / "burst.py")]


def _spec(turns: int, events: int) -> EpisodeSpec:
    return EpisodeSpec.model_validate(
        {
            "name": f"burst-{uuid.uuid4().hex[:8]}",
            "env": "script",
            "tasks": [{"id": "t0", "data": {"messages": [f"m{i}" for i in range(turns)]}}],
            "harness": {
                "command": BURST,
                "env": {"BURST_EVENTS": str(events)},
                "ready_timeout_s": 60,
                "stop_timeout_s": 2,
            },
            "max_turns": turns,
            "turn_timeout_s": 120,
        }
    )


async def _session_us_per_event(turns: int, events: int) -> float:
    """This process's CPU (user + system) per event over `turns` turns of the harness."""
    from episodes.session.live import LiveSession

    spec = _spec(turns, events)
    session = LiveSession(spec, spec.tasks[0], 0, f"bench-{uuid.uuid4().hex[:8]}")
    try:
        await session.open()
        await session.turn(0)  # warm: imports, first allocations
        cpu0 = time.process_time()
        seen = 0
        for n in range(1, turns):
            result = await session.turn(n)
            seen += len(result.record.events)
        cpu = time.process_time() - cpu0
    finally:
        await session.close()
    if seen != (turns - 1) * events:
        raise RuntimeError(f"saw {seen} events, expected {(turns - 1) * events}")
    return cpu / seen * 1e6


def _decoder_us_per_event(events: int, rounds: int) -> float:
    text = "x" * 64
    stream = b"".join(
        encode({"type": "event", "turn": 1, "event": {"kind": "log", "i": i, "text": text}})
        for i in range(events)
    )
    chunks = [stream[i : i + READ_CHUNK_BYTES] for i in range(0, len(stream), READ_CHUNK_BYTES)]
    cpu0 = time.process_time()
    for _ in range(rounds):
        decoder = PacketDecoder()
        n = sum(len(decoder.feed(c)) for c in chunks)
        assert n == events
    return (time.process_time() - cpu0) / (rounds * events) * 1e6


async def run(quick: bool = False, repeats: int | None = None) -> dict:
    repeats = repeats or (1 if quick else 5)
    turns = 5 if quick else 21  # the first is a warm-up
    events = 1000
    load_start = load()
    session, decoder = [], []
    for _ in range(repeats):
        session.append(await _session_us_per_event(turns, events))
        decoder.append(_decoder_us_per_event(events, turns - 1))
    figures = {"session_us_per_event": spread(session), "decoder_us_per_event": spread(decoder)}
    ratios = {
        "session_vs_decoder": ratio(
            figures["session_us_per_event"]["median"], figures["decoder_us_per_event"]["median"]
        )
    }
    print(
        f"harness events: worker CPU per event, {events} events a turn, {turns - 1} turns, "
        f"median [min..max] over {repeats} repeat(s); load {load_start:.1f} -> {load():.1f}"
    )
    rows = [
        ["LiveSession (driver + turn loop)", fmt_spread(figures["session_us_per_event"], "", 1)],
        ["PacketDecoder alone", fmt_spread(figures["decoder_us_per_event"], "", 1)],
    ]
    print(table(rows, ["", "us per event"]))
    print(f"session / decoder: {ratios['session_vs_decoder']:.2f}x")
    return {"figures": figures, "ratios": ratios, "events_per_turn": events}
