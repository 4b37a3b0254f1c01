"""`episodes harbor check PATH`: can these Harbor tasks be trusted?

For each task directory: the schema and the files (`task.load_task`), then two real
episodes in this process on the local Docker engine (no Temporal): the `oracle`
harness must score 1.0 (the reference solution passes the tests) and `nop` must
score 0.0 (the tests do not pass on an untouched box). One line per problem,
`<task>: <problem>`; the exit status says whether there was any.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from episodes.envs.harbor.task import HarborTaskError, load_task, task_dirs
from episodes.errors import EpisodesError


async def check_tasks(
    path: Path, *, run_agents: bool = True, say: Callable[[str], None] = print
) -> int:
    """Check every task under `path`; the number of problems found (each said once)."""
    try:
        dirs = task_dirs(path)
    except HarborTaskError as e:
        say(str(e))
        return 1
    problems = 0
    for d in dirs:
        try:
            task = load_task(d)
        except HarborTaskError as e:
            say(f"{d.name}: {str(e).split(': ', 1)[1]}")
            problems += 1
            continue
        found = [f"not enforced here: {f}" for f in task.not_enforced()]
        for step in task.steps:
            if step.solution is None or not (step.solution / "solve.sh").is_file():
                which = f"step {step.name!r}" if task.multi_step else "solution/solve.sh"
                found.append(f"{which}: no reference solution (solve.sh) for the oracle")
        if run_agents and not any("no reference solution" in p for p in found):
            found += await _agents(d)
        for line in found:
            say(f"{d.name}: {line}")
        problems += sum(not p.startswith("not enforced") for p in found)
        if not found:
            say(f"{d.name}: ok")
    return problems


async def _agents(task_dir: Path) -> list[str]:
    from episodes.local import run_episode_local
    from episodes.types.spec import load_harbor_dir, parse_spec

    out = []
    for harness, want in (("oracle", 1.0), ("nop", 0.0)):
        spec = parse_spec({"name": f"check-{harness}", "harbor": str(task_dir), "harness": harness})
        [task] = load_harbor_dir(task_dir)
        try:
            result = await run_episode_local(spec, task)
        except EpisodesError as e:
            out.append(f"{harness}: could not run ({str(e).splitlines()[0]})")
            continue
        if result.reward != want:
            why = result.error.splitlines()[0] if result.error else result.termination
            out.append(f"{harness} scored {result.reward}, want {want} ({why})")
    return out


def main(path: Path, run_agents: bool = True) -> int:
    problems = asyncio.run(check_tasks(path, run_agents=run_agents))
    return 1 if problems else 0
