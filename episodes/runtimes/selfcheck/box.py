"""Self-checks of the env's handle on its box (`episodes.runtimes.box.Box`), run on every
backend with the others (`selfcheck.SHARED_CHECKS`).

They use only `/bin/sh` and its usual tools, never python: a task image need not have
one. Paths are relative to the box's default directory, which every backend keeps
writable.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from pathlib import Path

from episodes.runtimes.box import Box
from episodes.runtimes.selfcheck.kit import Subject, T, equal, within


def _dir() -> str:
    return f"box-check-{uuid.uuid4().hex[:8]}"


async def box_runs_commands_with_env_cwd_and_exit_codes(s: Subject) -> None:
    box = Box(s.box)
    where = _dir()
    made = await within(box.run(["mkdir", "-p", where]))
    equal(made.exit_code, 0, "mkdir's exit code")
    r = await within(
        box.run(
            'printf "%s|%s" "$GIVEN" "$(basename "$(pwd)")"; echo oops >&2; exit 7',
            env={"GIVEN": "a b=c"},
        )
    )
    equal((r.exit_code, r.stderr, r.timed_out), (7, b"oops\n", False), "(exit, stderr, timed out)")
    equal(r.stdout.split(b"|")[0], b"a b=c", "the given variable")
    # A relative cwd is the backend's business; an absolute one is what we ask for.
    absolute = (await within(box.run(f"cd {where} && pwd"))).text().strip()
    there = await within(box.run(["/bin/sh", "-c", "pwd"], cwd=absolute))
    equal(there.text().strip(), absolute, "cwd of a command given an absolute cwd")
    fed = await within(box.run(["cat"], input=b"\x00\xffbytes in\n"))
    equal(fed.stdout, b"\x00\xffbytes in\n", "stdin given to a command, back on its stdout")


async def box_output_is_bounded_and_the_command_still_ends(s: Subject) -> None:
    box = Box(s.box, max_output_bytes=64 * 1024)
    # 4 MiB on each stream: far past the bound and any pipe buffer.
    script = (
        "i=0; while [ $i -lt 64 ]; do head -c 65536 /dev/zero; head -c 65536 /dev/zero >&2;"
        " i=$((i+1)); done; exit 3"
    )
    r = await within(box.run(script))
    equal(r.exit_code, 3, "exit code of a command that wrote more than the bound")
    equal((len(r.stdout), r.stdout_truncated), (64 * 1024, True), "(stdout kept, truncated)")
    equal((len(r.stderr), r.stderr_truncated), (64 * 1024, True), "(stderr kept, truncated)")


async def box_command_timeout_kills_it(s: Subject) -> None:
    box = Box(s.box)
    started = time.monotonic()
    r = await within(box.run("echo started; exec sleep 600", timeout_s=1.0))
    equal((r.timed_out, r.exit_code, r.stdout), (True, None, b"started\n"), "past its timeout")
    if time.monotonic() - started > T:
        raise AssertionError("run() with timeout_s=1 took longer than the check's bound")
    # The deadline (score time) caps a longer timeout the same way.
    with box.deadline_in(1.0):
        capped = await within(box.run(["sleep", "600"], timeout_s=600))
    equal(capped.timed_out, True, "a command past the box's deadline")
    with box.deadline_in(0.0):
        try:
            await box.run(["true"])
        except TimeoutError:
            pass
        else:
            raise AssertionError("a command started after the deadline ran")


async def box_files_round_trip(s: Subject) -> None:
    box = Box(s.box)
    path = f"{_dir()}/nested/dir/blob.bin"
    data = bytes(range(256)) * 1024 + b"no trailing newline"
    await within(box.write_file(path, data, mode=0o755))
    equal(await within(box.read_file(path)), data, "a file written then read back")
    mode = await within(box.run(["/bin/sh", "-c", 'test -x "$1" && echo x', "sh", path]))
    equal(mode.stdout, b"x\n", "the mode given to write_file")
    await within(box.write_file(path, "replaced"))
    equal(await within(box.read_file(path)), b"replaced", "a file written twice")
    try:
        await within(box.read_file(f"{_dir()}/missing"))
    except FileNotFoundError:
        pass
    else:
        raise AssertionError("read_file of a missing file did not raise FileNotFoundError")
    try:
        await within(box.read_file(path, max_bytes=4))
    except ValueError:
        pass
    else:
        raise AssertionError("read_file past max_bytes did not raise ValueError")


async def box_copies_a_directory_in(s: Subject) -> None:
    box = Box(s.box)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp)
        (src / "sub" / "deeper").mkdir(parents=True)
        (src / "empty").mkdir()
        (src / "run.sh").write_text("#!/bin/sh\necho ran $1\n")
        (src / "run.sh").chmod(0o755)
        (src / "sub" / "deeper" / "data.bin").write_bytes(bytes(range(256)))
        # Task content is untrusted: a link is copied as a link, never followed here.
        (src / "environ").symlink_to("/proc/self/environ")
        dest = _dir()
        await within(box.copy_in(src, dest))
    ran = await within(box.run([f"./{dest}/run.sh", "ok"]))
    equal((ran.exit_code, ran.stdout), (0, b"ran ok\n"), "a copied script, run in the box")
    data = await within(box.read_file(f"{dest}/sub/deeper/data.bin"))
    equal(data, bytes(range(256)), "a copied nested file")
    empty = await within(box.run(["test", "-d", f"{dest}/empty"]))
    equal(empty.exit_code, 0, "a copied empty directory exists")
    link = await within(
        box.run(["/bin/sh", "-c", 'test -L "$1" && echo link', "sh", f"{dest}/environ"])
    )
    equal(link.stdout, b"link\n", "a copied link is a link in the box, not the file it names")


BOX_CHECKS = [
    box_runs_commands_with_env_cwd_and_exit_codes,
    box_output_is_bounded_and_the_command_still_ends,
    box_command_timeout_kills_it,
    box_files_round_trip,
    box_copies_a_directory_in,
]
