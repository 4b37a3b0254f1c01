"""Run in a child process whose environment holds a canary (the worker's secrets):
`Box.copy_in` of a directory into a box, then what the box holds there.

    python -m tests.support.copy_in_probe RUNTIME SOURCE

RUNTIME: `sandbox` or `subprocess` (`isolation: none`), with `-notar` for a box whose
PATH has a shell and its tools but no `tar` (copy_in's one-command-per-file way).
Prints one JSON object: `listing` (every entry under the copy: `L path target` for a
link, `F path` and its bytes for a file), or `error` (copy_in refused).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from episodes.runtimes.box import Box
from episodes.runtimes.sandbox.runtime import SandboxRuntime
from episodes.runtimes.subprocess import SubprocessRuntime
from episodes.types.runtime import SubprocessConfig

# What the box without tar has: enough for Box (sh, cat, mkdir, chmod, dirname, ln).
TOOLS = ("sh", "cat", "mkdir", "chmod", "dirname", "ln", "readlink", "find", "sort")
LIST = r"""cd "$1" && find . | sort | while read -r f; do
  if [ -L "$f" ]; then echo "L $f $(readlink "$f")"
  elif [ -f "$f" ]; then echo "F $f"; cat "$f"; echo
  fi
done"""


def _no_tar_path(tmp: str) -> str:
    bin_dir = Path(tmp) / "bin"
    bin_dir.mkdir()
    for name in TOOLS:
        found = shutil.which(name)
        if found:
            (bin_dir / name).symlink_to(found)
    assert shutil.which("tar", path=str(bin_dir)) is None
    return str(bin_dir)


def _runtime(kind: str, tmp: str):  # type: ignore[no-untyped-def]
    sandbox = kind.startswith("sandbox")
    if not kind.endswith("-notar"):
        return SandboxRuntime() if sandbox else SubprocessRuntime()
    path = _no_tar_path(tmp)
    base = SandboxRuntime if sandbox else SubprocessRuntime
    config = SubprocessConfig(ro_paths=[tmp]) if sandbox else SubprocessConfig(isolation="none")

    class NoTar(base):  # type: ignore[valid-type,misc]
        async def open_process(self, argv, env=None, cwd=None, **kw):  # type: ignore[no-untyped-def]
            return await super().open_process(argv, {**(env or {}), "PATH": path}, cwd, **kw)

    return NoTar(config)


async def main(kind: str, source: str) -> dict[str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        runtime = _runtime(kind, tmp)
        await runtime.start()
        try:
            box = Box(runtime)
            try:
                await box.copy_in(source, "copied")
            except OSError as e:
                return {"error": str(e)}
            listing = await box.run(["/bin/sh", "-c", LIST, "sh", "copied"])
            return {"listing": listing.text() + listing.text("stderr")}
        finally:
            await runtime.stop()


if __name__ == "__main__":
    assert os.environ.get("CANARY"), "run with a CANARY in the environment"
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2]))))
