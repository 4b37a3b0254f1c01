"""A fork's box: a Docker commit of the parent's box vs a fresh box and the replay.

A fork's branch opens a fresh box from the spec's image and replays the parent's turns
exactly (episodes/replay.py): the harness's own state (an LLM agent's
conversation) is rebuilt by answering its model calls from the record, the files the
agent wrote by running its deterministic tool calls again. A `docker commit` of the
parent's box at the fork turn keeps its files, not its processes: the harness still
starts anew and replays its model calls. So a snapshot can only replace the box's start
and the re-run of the work that wrote files, at the price of the commit (and of deleting
the image after).

Per repeat, a parent box (`episodes-harness:latest`) writes `mb` MiB (dd from
/dev/urandom, a stand-in for the agent's work), then side by side:
- snapshot: `docker commit` the parent; `docker run` the branch from that image;
  `docker rmi` the image once the branch is gone;
- replay: `docker run` the branch from the base image; run the work again in it.
Both through this engine's docker CLI; its storage driver is reported (with `vfs` a
commit copies the box's whole filesystem). The model-call replay both paths pay is
`replay_cost`'s per-call figure.

    python -m bench replay [--quick]          # with replay_cost's figures
"""

from __future__ import annotations

import asyncio
import shutil
import time
import uuid

from bench.common import fmt_spread, spread, table

IMAGE = "episodes-harness:latest"


async def _docker(*args: str) -> tuple[float, str]:
    """Run `docker ARGS`; (wall ms, stdout). RuntimeError with stderr on failure."""
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        "docker", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await proc.communicate()
    ms = (time.perf_counter() - t0) * 1000
    if proc.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args[:2])}: {err.decode().strip()[:300]}")
    return ms, out.decode().strip()


async def unavailable() -> str | None:
    """Why this cannot run here, or None."""
    if shutil.which("docker") is None:
        return "no docker CLI"
    try:
        await _docker("image", "inspect", IMAGE)
    except RuntimeError:
        return f"no {IMAGE} image (make images)"
    return None


def _work(mb: int) -> list[str]:
    return ["sh", "-c", f"dd if=/dev/urandom of=/tmp/work.bin bs=1M count={mb} 2>/dev/null"]


async def _run_box(image: str) -> tuple[float, str]:
    # `cat` on an open stdin keeps the box up (the image has no `sleep`).
    return await _docker("run", "-d", "-i", "--label", "episodes.bench=fork", image, "cat")


async def _one(mb: int, replay_first: bool) -> dict[str, float]:
    tag = f"episodes-bench-fork:{uuid.uuid4().hex[:8]}"
    boxes: list[str] = []
    out: dict[str, float] = {}

    async def snapshot() -> str:
        # Commit the parent, start a branch from it.
        out["commit"], _ = await _docker("commit", parent, tag)
        out["start_snapshot"], branch = await _run_box(tag)
        boxes.append(branch)
        return branch

    async def replay() -> None:
        # Start a branch from the base image, do the work again.
        out["start_base"], fresh = await _run_box(IMAGE)
        boxes.append(fresh)
        out["work"], _ = await _docker("exec", fresh, *_work(mb))

    try:
        _, parent = await _run_box(IMAGE)
        boxes.append(parent)
        await _docker("exec", parent, *_work(mb))
        if replay_first:  # alternated: neither path always runs on a warmer engine
            await replay()
            branch = await snapshot()
        else:
            branch = await snapshot()
            await replay()
        await _docker("rm", "-f", branch)
        boxes.remove(branch)
        out["rmi"], _ = await _docker("rmi", tag)
        tag = ""
    finally:
        if boxes:
            await _docker("rm", "-f", *boxes)
        if tag:
            try:
                await _docker("rmi", "-f", tag)
            except RuntimeError:
                pass  # never committed
    out["snapshot_path"] = out["commit"] + out["start_snapshot"] + out["rmi"]
    out["replay_path"] = out["start_base"] + out["work"]
    return out


async def run(quick: bool = False, repeats: int | None = None) -> dict:
    why = await unavailable()
    if why is not None:
        print(f"fork snapshot vs replay: skipped ({why})")
        return {"skipped": why}
    _, driver = await _docker("info", "--format", "{{.Driver}}")
    sizes = [1, 16] if quick else [1, 16, 128]
    repeats = repeats or (1 if quick else 3)
    figures: dict[str, dict[str, dict[str, float]]] = {}
    for mb in sizes:
        samples: dict[str, list[float]] = {}
        for i in range(repeats):
            for k, v in (await _one(mb, replay_first=i % 2 == 1)).items():
                samples.setdefault(k, []).append(v)
        figures[f"{mb}MiB"] = {k: spread(v) for k, v in samples.items()}
    keys = ["commit", "start_snapshot", "rmi", "snapshot_path", "start_base", "work", "replay_path"]
    rows = [[k, *(fmt_spread(figures[s][k], " ms") for s in figures)] for k in keys]
    print(
        f"fork's box: docker commit vs fresh box + work again ({driver} storage), "
        f"{repeats} repeat(s), median [min..max]"
    )
    print(table(rows, ["step", *figures]))
    return {"driver": driver, "repeats": repeats, "figures": figures}
