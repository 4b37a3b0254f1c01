"""Task content cannot read the worker: `Box.copy_in` of a directory whose files are
links to `/proc/self/environ` and to a worker file copies links, not what they point
at, on a box without `tar` (one command per file) and with it, sandboxed or not.

The copy runs in a child process whose environment holds a canary (as a worker's
holds its upstream API key): `/proc/self/environ` is a process's environment as it
was started, so only a fresh process shows it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from episodes.runtimes.sandbox.runtime import bwrap_path
from tests.conftest import ROOT

pytestmark = [pytest.mark.timeout(180)]

CANARY = "canary-env-" + uuid.uuid4().hex
CANARY_FILE = "canary-file-" + uuid.uuid4().hex
SANDBOX = pytest.mark.skipif(bwrap_path() is None, reason="bwrap is not installed")


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    """A task's tests/: links out of it beside an ordinary file, a relative link, a dir."""
    secret = tmp_path / "worker-secret.txt"
    secret.write_text(CANARY_FILE)
    tests = tmp_path / "task" / "tests"
    (tests / "sub").mkdir(parents=True)
    (tests / "test.sh").write_text("#!/bin/sh\necho ok\n")
    (tests / "test.sh").chmod(0o755)
    (tests / "notes.txt").symlink_to("/proc/self/environ")
    (tests / "sub" / "key").symlink_to(secret)
    (tests / "up").symlink_to("..")
    (tests / "again.sh").symlink_to("test.sh")
    return tests


def _probe(kind: str, source: Path) -> dict[str, str]:
    env = {**os.environ, "CANARY": CANARY, "UPSTREAM_KEY": CANARY}
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.copy_in_probe", kind, str(source)],
        capture_output=True,
        text=True,
        timeout=150,
        env=env,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert CANARY not in done.stderr and CANARY_FILE not in done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize(
    "kind",
    [
        "subprocess-notar",
        "subprocess",
        pytest.param("sandbox-notar", marks=SANDBOX),
        pytest.param("sandbox", marks=SANDBOX),
    ],
)
def test_links_are_copied_as_links_and_nothing_of_the_worker_is_read(kind, hostile) -> None:
    seen = _probe(kind, hostile)
    assert "error" not in seen, seen
    listing = seen["listing"]
    assert CANARY not in listing, "the worker's environment was copied into the box"
    assert CANARY_FILE not in listing, "a worker file a link pointed at was copied into the box"
    lines = set(listing.splitlines())
    assert "L ./notes.txt /proc/self/environ" in lines, listing
    assert f"L ./sub/key {hostile.parent.parent / 'worker-secret.txt'}" in lines, listing
    assert {"L ./up ..", "L ./again.sh test.sh", "F ./test.sh"} <= lines, listing


def test_a_fifo_is_refused_with_one_line_not_read(tmp_path: Path) -> None:
    # Opening a FIFO to read it would block the worker until a writer came.
    from episodes.runtimes.box_copy import read_tree

    (tmp_path / "ok.txt").write_text("ok")
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(OSError, match=r"pipe: not a file, directory or link; not copied"):
        read_tree(tmp_path)
