"""Oracle harness: each turn, runs the reference solution the env put at /solution.

The built-in `harness: oracle` (docs/harbor.md). A Harbor task's env copies the task's
(or the current step's) `solution/` to `/solution` in the box before each turn when
the spec's harness is the oracle; this runs `/solution/solve.sh` there (with bash if
the image has it, else sh), in the harness's own directory (the box's workdir), with
the variables of the task's `[solution].env` (`/solution/.episodes-env.json`).

Standard library only, and runnable as a path (`python3 -I .../oracle.py`): task
images need no Python of their own; the Docker runtime's bundle brings one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

# `-I` leaves the script's folder off sys.path: find the sdk two folders up.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from episodes.harness import sdk

SOLUTION = os.environ.get("EPISODES_SOLUTION_DIR", "/solution")
OUTPUT_TAIL = 4000


def handle(turn: int, message: Any, emit: Any) -> Any:
    script = Path(SOLUTION) / "solve.sh"
    if not script.is_file():
        raise FileNotFoundError(f"{script}: no reference solution for this turn")
    env = dict(os.environ)
    extra = Path(SOLUTION) / ".episodes-env.json"
    if extra.is_file():
        env.update(json.loads(extra.read_text()))
    shell = shutil.which("bash", path=env.get("PATH")) or "sh"
    proc = subprocess.run(
        [shell, str(script)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        preexec_fn=sdk.die_with_parent,
        check=False,
    )
    output = proc.stdout.decode("utf-8", errors="replace")
    # The pid shows one harness process serving every step of a multi-step task.
    return {"exit_code": proc.returncode, "output": output[-OUTPUT_TAIL:], "pid": os.getpid()}


def main() -> None:
    sdk.serve(handle)


if __name__ == "__main__":
    main()
