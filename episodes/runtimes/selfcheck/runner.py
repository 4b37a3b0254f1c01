"""The runtime self-check: plain async checks, for any backend's author to run.

    python -m episodes.runtimes.selfcheck docker            # every check, a report
    python -m episodes.runtimes.selfcheck subprocess --only kill_after_exit

or from a test suite: `await check(Subject(box, python=["python3"]))` for each of
`SHARED_CHECKS` (they only run processes, so one started box may serve them all)
and `FRESH_CHECKS` (each gets a fresh started box, which it may stop or break;
they live in `selfcheck.fresh`).
A check raises AssertionError saying what broke, or `Skipped`. No pytest needed.

What every backend must do (and what callers may rely on):
- stdout and stderr are separate raw byte streams; read() returns b"" at end of stream.
- stdin takes writes at any time while the process runs; close_stdin() is its EOF. A
  write to a process that does not read waits (it neither fails nor returns early)
  until the process reads or dies; then it raises BrokenPipeError/ConnectionResetError.
- wait() returns the exit code, or the NEGATIVE signal number for a signalled process
  (-15 after terminate(), -9 after kill()); a process of a box that was stopped
  reports -9. returncode is None until then.
- terminate()/kill() signal the whole process group, so children go too; kill()
  after the leader exited still sweeps what it left in its group.
- A process sees exactly the env it is given (plus what the box itself defines),
  never the caller's environment; cwd defaults to a writable directory of the box.
- stop() is idempotent and finishes even if its caller is cancelled; after it
  alive() is False and open_process() raises.

Programs are `python -c` snippets so that they run in any box with a python.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import sys
import traceback
from collections.abc import Callable

from episodes.harness.protocol import PacketDecoder, encode, read_packet
from episodes.runtimes.base import Runtime
from episodes.runtimes.selfcheck.box import BOX_CHECKS
from episodes.runtimes.selfcheck.fresh import (
    FRESH_CHECKS,
    a_box_killed_from_outside_is_lost_a_process_exit_is_not,
    alive_is_false_after_the_box_died,
    stop_ends_running_processes,
    stop_is_finished_even_if_the_caller_is_cancelled,
    stop_twice,
)
from episodes.runtimes.selfcheck.kit import (
    ECHO_HARNESS,
    IGNORE_TERM,
    LEAVE_A_CHILD,
    LINE_ECHO,
    SLEEPER,
    Check,
    Skipped,
    Subject,
    equal,
    pid_gone,
    pid_state,
    raises,
    read_line,
    run,
    running,
    within,
)

__all__ = [
    "FRESH_CHECKS",
    "SHARED_CHECKS",
    "Check",
    "Skipped",
    "Subject",
    "a_box_killed_from_outside_is_lost_a_process_exit_is_not",
    "alive_is_false_after_the_box_died",
    "run_checks",
    "stop_ends_running_processes",
    "stop_is_finished_even_if_the_caller_is_cancelled",
    "stop_twice",
]


# -- checks on a shared box --------------------------------------------------------------
async def stdout_and_stderr_are_separate(s: Subject) -> None:
    code = "import sys; sys.stdout.write('to-out'); sys.stderr.write('to-err'); print(' more')"
    equal(await run(s, code), (0, b"to-out more\n", b"to-err"), "(exit code, stdout, stderr)")


async def large_interleaved_output_arrives_intact(s: Subject) -> None:
    # More than any internal buffer (pipe, frame, flow-control window), both streams
    # at once, read concurrently as a host must.
    code = (
        "import os, sys\n"
        "for i in range(96):\n"
        "    block = bytes([i]) * 65536\n"
        "    os.write(1, block); os.write(2, block[::-1])\n"
    )
    rc, out, err = await run(s, code)
    expected = b"".join(bytes([i]) * 65536 for i in range(96))
    equal(rc, 0, "exit code")

    def digest(data: bytes) -> tuple[int, str]:  # not 6 MiB of diff on failure
        return len(data), hashlib.sha256(data).hexdigest()

    equal(digest(out), digest(expected), "stdout (length, sha256)")
    equal(digest(err), digest(expected), "stderr (length, sha256)")


async def stdin_round_trips_with_delayed_writes(s: Subject) -> None:
    async with running(s, LINE_ECHO) as proc:
        await proc.write(b"first\n")
        equal(await read_line(proc.stdout), b"FIRST\n", "first echoed line")
        await asyncio.sleep(0.5)  # the process sits blocked on stdin meanwhile
        await proc.write(b"sec")
        await asyncio.sleep(0.2)
        await proc.write(b"ond\nthird\n")
        equal(await read_line(proc.stdout), b"SECOND\n", "a line written in two parts")
        equal(await read_line(proc.stdout), b"THIRD\n", "third echoed line")
        equal(proc.returncode, None, "returncode while running")
        await proc.close_stdin()
        equal(await within(proc.stdout.read()), b"", "stdout after close_stdin")
        equal(await within(proc.stderr.read()), b"stdin closed\n", "stderr: EOF seen")
        equal(await within(proc.wait()), 0, "exit code")
        equal(proc.returncode, 0, "returncode after wait")


async def framed_round_trips(s: Subject) -> None:
    decoder = PacketDecoder()
    async with running(s, ECHO_HARNESS) as proc:
        equal(await within(read_packet(proc.stdout, decoder)), {"type": "ready"}, "first packet")
        messages = [
            {"text": "hello"},
            {"text": "ünïcødé ✓", "n": [1, 2.5, None, True]},
            {"blob": "x" * (1024 * 1024)},  # a packet bigger than any read chunk
            "just a string",
        ]
        for turn, message in enumerate(messages):
            await proc.write(encode({"type": "turn", "turn": turn, "message": message}))
            event = await within(read_packet(proc.stdout, decoder))
            size = {"size": len(json.dumps(message))}
            equal(event, {"type": "event", "turn": turn, "event": size}, f"event of turn {turn}")
            reply = await within(read_packet(proc.stdout, decoder))
            equal(reply, {"type": "reply", "turn": turn, "message": message}, f"reply {turn}")
        await proc.write(encode({"type": "shutdown"}))
        equal(await within(read_packet(proc.stdout, decoder)), None, "stdout after shutdown")
        equal(await within(proc.wait()), 0, "exit code")


async def exit_codes(s: Subject) -> None:
    for code in (0, 3):
        rc, _, _ = await run(s, f"import sys; sys.exit({code})")
        equal(rc, code, f"exit code of sys.exit({code})")


async def concurrent_processes_keep_their_streams(s: Subject) -> None:
    async def one(i: int) -> tuple[int, bytes, bytes]:
        code = f"import sys; sys.stdout.write('out{i}' * 1000); sys.stderr.write('err{i}')"
        return await run(s, code)

    results = await within(asyncio.gather(*(one(i) for i in range(5))))
    want = [(0, f"out{i}".encode() * 1000, f"err{i}".encode()) for i in range(5)]
    equal(results, want, "five concurrent processes' (exit code, stdout, stderr)")


async def terminate_reports_negative_sigterm(s: Subject) -> None:
    async with running(s, SLEEPER) as proc:
        if not isinstance(proc.pid, int):
            raise AssertionError(f"pid of a running process: {proc.pid!r}, want an int")
        equal(await read_line(proc.stdout), b"ready\n", "first line")
        equal(proc.returncode, None, "returncode while running")
        await proc.terminate()
        equal(await within(proc.wait()), -15, "wait() after terminate()")
        equal(proc.returncode, -15, "returncode after terminate()")
        await proc.terminate()  # no-op once exited
        await proc.kill()


async def kill_ends_a_group_that_ignores_sigterm(s: Subject) -> None:
    async with running(s, IGNORE_TERM) as proc:
        ready, child = (await read_line(proc.stdout)).split()
        equal(ready, b"ready", "first word")
        await proc.terminate()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(proc.wait()), 1.0)
            raise AssertionError("a process that ignores SIGTERM exited on terminate()")
        equal(proc.returncode, None, "returncode after an ignored terminate()")
        await proc.kill()
        equal(await within(proc.wait()), -9, "wait() after kill()")
        equal(await within(proc.stdout.read()), b"", "stdout after kill()")
        await pid_gone(s, child.decode(), "the child outlived kill()")


async def kill_after_exit_sweeps_the_group(s: Subject) -> None:
    # The leader exits and leaves a child behind (as a harness that spawned a tool
    # may): kill() after the exit must still end it, or a pooled box keeps it.
    async with running(s, LEAVE_A_CHILD) as proc:
        child = (await read_line(proc.stdout)).strip()
        if not child.isdigit():
            raise AssertionError(f"the leader did not report its child: {child!r}")
        equal(await within(proc.wait()), 0, "the leader's exit code")
        await pid_state(s, child.decode(), "alive", "the child before kill()", wait_s=0)
        await proc.kill()
        await pid_gone(s, child.decode(), "the leader's child outlived kill() after its exit")
        await proc.kill()  # a second sweep is a no-op


async def write_after_exit_raises(s: Subject) -> None:
    async with running(s, "pass") as proc:
        equal(await within(proc.wait()), 0, "exit code")

        async def flood() -> None:
            for _ in range(100):  # an OS may accept a first write into a dead pipe
                await proc.write(b"x" * 65536)

        await raises(
            flood(), BrokenPipeError, ConnectionResetError, what="writing to an exited process"
        )


async def kill_releases_a_write_blocked_on_a_process_that_never_reads(s: Subject) -> None:
    async with running(s, SLEEPER) as proc:
        equal(await read_line(proc.stdout), b"ready\n", "first line")
        # More than a maximal packet (16 MiB) and than any pipe or socket buffer holds:
        # this write cannot complete, and must not fail either, until the process dies.
        write = asyncio.ensure_future(proc.write(b"x" * (20 * 1024 * 1024)))
        done, _ = await asyncio.wait([write], timeout=1.0)
        if done:
            raise AssertionError(f"a 20 MiB write to a process that never reads returned: {write}")
        await proc.kill()
        equal(await within(proc.wait()), -9, "wait() after kill()")
        await raises(within(write), BrokenPipeError, ConnectionResetError, what="the blocked write")


async def env_is_exactly_what_was_given(s: Subject) -> None:
    secret = "EPISODES_CONTRACT_HOST_SECRET"
    before = os.environ.get(secret)
    os.environ[secret] = "must-not-leak"
    try:
        code = "import json, os; print(json.dumps(dict(os.environ)))"
        rc, out, _ = await run(s, code, env={"GIVEN": "yes", "OTHER": "a=b c"})
    finally:
        if before is None:
            os.environ.pop(secret, None)
        else:
            os.environ[secret] = before
    env = json.loads(out)
    equal(rc, 0, "exit code")
    equal((env.get("GIVEN"), env.get("OTHER")), ("yes", "a=b c"), "the given variables")
    if secret in env:
        raise AssertionError("the caller's environment leaked into the box")


async def cwd_default_is_writable_and_explicit_cwd_is_used(s: Subject) -> None:
    code = "import os; open('probe.txt', 'w').write('ok'); print(os.getcwd())"
    rc, out, err = await run(s, code)
    equal(rc, 0, f"writing into the default cwd ({err!r})")
    default = out.decode().strip()
    rc, out, _ = await run(s, "import tempfile; print(tempfile.mkdtemp())")
    target = out.decode().strip()
    equal(rc, 0, "making a directory")
    if target == default:
        raise AssertionError(f"mkdtemp() returned the default cwd {default!r}")
    rc, out, _ = await run(s, "import os; print(os.path.realpath(os.getcwd()))", cwd=target)
    _, expected, _ = await run(s, f"import os; print(os.path.realpath({target!r}))")
    equal((rc, out), (0, expected), "(exit code, cwd) of a process given cwd")


SHARED_CHECKS: list[Check] = [
    stdout_and_stderr_are_separate,
    large_interleaved_output_arrives_intact,
    stdin_round_trips_with_delayed_writes,
    framed_round_trips,
    exit_codes,
    concurrent_processes_keep_their_streams,
    terminate_reports_negative_sigterm,
    kill_ends_a_group_that_ignores_sigterm,
    kill_after_exit_sweeps_the_group,
    write_after_exit_raises,
    kill_releases_a_write_blocked_on_a_process_that_never_reads,
    env_is_exactly_what_was_given,
    cwd_default_is_writable_and_explicit_cwd_is_used,
    # The env's handle on its box, over the same interface (selfcheck.box).
    *BOX_CHECKS,
]


# -- running them ------------------------------------------------------------------------
async def run_checks(
    make_runtime: Callable[[], Runtime],
    *,
    python: list[str],
    kill_box: Callable[[Runtime], None] | None = None,
    only: Callable[[Check], bool] = lambda check: True,
) -> dict[str, str]:
    """Run every selected check; returns {check name: "ok" | "skipped: …" | "FAILED: …"}."""
    results: dict[str, str] = {}

    async def one(check: Check, box: Runtime) -> None:
        try:
            await check(Subject(box, python, kill_box))
        except Skipped as e:
            results[check.__name__] = f"skipped: {e}"
        except Exception as e:  # AssertionError, or the backend broke in its own way
            results[check.__name__] = f"FAILED: {e!r}"
            traceback.print_exc()
        else:
            results[check.__name__] = "ok"

    shared = [c for c in SHARED_CHECKS if only(c)]
    if shared:
        box = make_runtime()
        await box.start()
        try:
            for check in shared:
                await one(check, box)
        finally:
            await box.stop()
    for check in (c for c in FRESH_CHECKS if only(c)):
        box = make_runtime()
        await box.start()
        try:
            await one(check, box)
        finally:
            await box.stop()
    return results


def main(argv: list[str] | None = None) -> int:
    from pydantic import TypeAdapter

    from episodes.runtimes import make_runtime
    from episodes.types.runtime import RuntimeConfig

    parser = argparse.ArgumentParser(
        prog="python -m episodes.runtimes.selfcheck",
        description="Run the runtime self-check against a backend (it provisions real boxes).",
    )
    from episodes.runtimes.backends import BACKENDS

    parser.add_argument("type", help=f"the runtime type: {', '.join(BACKENDS)}")
    parser.add_argument("--config", default="{}", help="more runtime config fields, as JSON")
    parser.add_argument("--python", help="argv prefix for python in the box (default python3)")
    parser.add_argument("--only", help="run only the checks whose names contain this")
    args = parser.parse_args(argv)
    config = TypeAdapter(RuntimeConfig).validate_python(
        {**json.loads(args.config), "type": args.type}
    )
    default = [sys.executable] if args.type == "subprocess" else ["python3"]
    python = args.python.split() if args.python else default
    results = asyncio.run(
        run_checks(
            lambda: make_runtime(config),
            python=python,
            only=lambda check: args.only is None or args.only in check.__name__,
        )
    )
    for name, verdict in results.items():
        print(f"{name}: {verdict}")
    failed = sum(v.startswith("FAILED") for v in results.values())
    print(f"{len(results) - failed}/{len(results)} passed or skipped; {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
