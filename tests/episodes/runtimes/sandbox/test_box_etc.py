"""A sandbox box's /etc (issue 32): the few host files a program needs, copied once per
worker into one read-only bind, following the host when it changes; never a file the
list does not name."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from episodes.runtimes.sandbox import etc as box_etc
from episodes.runtimes.sandbox.runtime import SandboxRuntime, bwrap_path
from episodes.types.runtime import SubprocessConfig

pytestmark = [
    pytest.mark.skipif(bwrap_path() is None, reason="bwrap is not installed"),
    pytest.mark.timeout(120),
]

READ = (
    "import json, os, sys\n"
    "print(json.dumps({p: open(p).read() if os.path.exists(p) else None for p in sys.argv[1:]}))"
)


async def _read(box: SandboxRuntime, *paths: str) -> dict[str, str | None]:
    proc = await box.open_process([sys.executable, "-c", READ, *paths], {})
    await proc.close_stdin()
    out = (await proc.stdout.read()).decode()
    assert await proc.wait() == 0
    return json.loads(out)


@pytest.fixture
def host_etc(tmp_path, monkeypatch) -> Path:
    """A stand-in for the host's /etc: what the copy is made from."""
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    (etc / "hosts").write_text("127.0.0.1 localhost\n")
    (etc / "shadow").write_text("root:SECRET:::::::\n")  # never named: never copied
    (etc / "localtime").symlink_to("/usr/share/zoneinfo/Etc/UTC")
    (etc / "ssl").mkdir()
    (etc / "ssl" / "cert.pem").write_text("CERT\n")
    monkeypatch.setattr(box_etc, "ETC", str(etc))
    monkeypatch.setattr(box_etc, "_copies", {})
    return etc


async def test_a_box_sees_the_named_etc_files_and_follows_the_host(host_etc):
    box = SandboxRuntime()
    await box.start()
    try:
        got = await _read(box, "/etc/passwd", "/etc/shadow", "/etc/ssl/cert.pem")
        assert got == {
            "/etc/passwd": "root:x:0:0::/root:/bin/sh\n",
            "/etc/shadow": None,
            "/etc/ssl/cert.pem": "CERT\n",
        }
        assert os.readlink(box_etc._copies[os.getpid()][1] + "/localtime").endswith("Etc/UTC")
    finally:
        await box.stop()
    # A change on the host reaches the next box (the copy is made again)...
    (host_etc / "hosts").write_text("127.0.0.1 localhost changed\n")
    (host_etc / "ssl" / "cert.pem").write_text("CERT 2\n")  # a bind: live
    box = SandboxRuntime()
    await box.start()
    try:
        got = await _read(box, "/etc/hosts", "/etc/ssl/cert.pem")
        assert got == {
            "/etc/hosts": "127.0.0.1 localhost changed\n",
            "/etc/ssl/cert.pem": "CERT 2\n",
        }
        # ...and no box can write into the copy every box shares.
        proc = await box.open_process(["sh", "-c", "echo x >> /etc/hosts"], {})
        await proc.close_stdin()
        assert await proc.wait() != 0
    finally:
        await box.stop()


async def test_a_spec_binding_a_file_inside_etc_still_starts(tmp_path):
    """A read-only /etc has no room for a bind's mount point: such a box binds /etc's
    entries one by one, as before."""
    if not os.access("/etc", os.W_OK):
        pytest.skip("needs a file of its own in the host's /etc")
    mine = Path(f"/etc/episodes-test-{os.getpid()}.conf")
    mine.write_text("mine\n")
    try:
        box = SandboxRuntime(SubprocessConfig(ro_paths=[str(mine)]))
        await box.start()
        try:
            got = await _read(box, str(mine), "/etc/passwd")
            assert got[str(mine)] == "mine\n" and got["/etc/passwd"]
        finally:
            await box.stop()
    finally:
        mine.unlink()
