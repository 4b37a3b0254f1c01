"""The Docker runtime: a long-lived, locked-down container; every process is an exec in it.

The container only sleeps (`sleep infinity` under docker's init, which reaps zombies);
harness processes are `docker exec`s (see `docker.process`). Blocking SDK calls run in
threads (see `docker.engine`), so the event loop never blocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

from episodes.errors import ImageMissing, RuntimeUnavailable
from episodes.runtimes.base import OPEN_FILES, Runtime
from episodes.runtimes.docker.engine import (
    ENGINE_HINT,
    MANAGED_LABEL,
    WORKER_STARTED_LABEL,
    call,
    cleanup_orphans,
    docker,
    image_available,
    owned,
    remove,
    shared_client,
)
from episodes.runtimes.docker.limits import DockerLimitWatch
from episodes.runtimes.docker.process import WRAPPER, DockerProcess
from episodes.runtimes.host_dirs import box_dir_prefix
from episodes.types.runtime import DockerConfig

__all__ = ["DockerProcess", "DockerRuntime", "cleanup_orphans", "image_available"]

log = logging.getLogger(__name__)

DEFAULT_IMAGE = DockerConfig().image
_QUIET_EXEC_S = 30.0
# Where the box sees its private host directory (the session's Unix sockets live there).
CHANNEL_IN_BOX = "/run/episodes"
# The worker's control execs (sweeps, signals) and the box's `sleep`; never a harness.
CONTROL_USER = "0:0"


def _sweeper(rounds: int, kill_if: str) -> str:
    """A shell loop that SIGKILLs the box's processes matching `kill_if` (a test on
    `$1`, the state, and `$2`, the parent pid, from /proc/PID/stat), never pid 1
    (docker's init), the box's own `sleep infinity` (init's oldest child; execs have
    no parent inside the box) or itself, for up to `rounds` rounds (a process may
    fork meanwhile); exit 1 if some remain."""
    return r"""k= t=
for f in /proc/[0-9]*/stat; do
  read -r line <"$f" 2>/dev/null || continue
  set -- ${line##*") "}
  [ "$2" = 1 ] || continue
  if [ -z "$t" ] || [ "${20}" -lt "$t" ]; then k=${f#/proc/}; k=${k%/stat}; t=${20}; fi
done
n=0
while [ "$n" -lt ROUNDS ]; do
  v=
  for f in /proc/[0-9]*/stat; do
    p=${f#/proc/}; p=${p%/stat}
    [ "$p" = 1 ] || [ "$p" = $$ ] || [ "$p" = "$k" ] && continue
    read -r line <"$f" 2>/dev/null || continue
    set -- ${line##*") "}
    KILL_IF && v="$v $p"
  done
  [ -n "$v" ] || exit 0
  kill -9 $v 2>/dev/null
  n=$((n+1)); sleep 0.1
done
exit 1
""".replace("ROUNDS", str(rounds)).replace("KILL_IF", kill_if)


# Every process in the box that is not a zombie (the pool's sweep before parking).
BOX_SWEEPER = _sweeper(5, '[ "$1" != Z ]')

# What the box's processes left behind and nothing else: every process whose parent is
# pid 1 (docker's init adopts an orphan: a `cmd &` whose shell exited, a daemon, a
# `setsid`/`nohup` leftover) but the box's own `sleep`, with the trees under them (a
# killed parent's children are adopted next, so the next round finds them). The execs
# (a live harness, the relay, this script) have no parent inside the box and are spared
# with their own children.
ORPHAN_SWEEPER = _sweeper(10, '[ "$2" = 1 ] && [ "$1" != Z ]')


def _process_started() -> str:
    return f"{psutil.Process().create_time():.3f}"


class DockerRuntime(Runtime):
    """A container that lives as long as the box; locked down unless the config opens it."""

    def __init__(self, config: DockerConfig | None = None, labels: dict[str, str] | None = None):
        self.config = config or DockerConfig()
        self.name = f"episodes-{uuid.uuid4().hex[:12]}"
        self.id = ""
        given = dict(labels or {})
        self.labels = {
            MANAGED_LABEL: "true",
            "episodes.worker": given.pop("worker", ""),
            # With the pid in the worker id, who made the box: a restarted container's
            # new worker often has the old one's pid (workers.orphans compares both).
            WORKER_STARTED_LABEL: given.pop("worker_started", "") or _process_started(),
            "episodes.session": given.pop("session", ""),
        }
        for key, value in given.items():
            self.labels[key if key.startswith("episodes.") else f"episodes.{key}"] = value
        self.api: Any = None
        self._start_task: asyncio.Future[None] | None = None
        self._channel: Path | None = None
        self._limits: DockerLimitWatch | None = None

    @property
    def channel_dir(self) -> tuple[Path, str] | None:
        return (self._channel, CHANNEL_IN_BOX) if self._channel is not None else None

    async def start(self) -> None:
        if self._stopped:
            raise RuntimeError(f"docker runtime {self.name} was stopped; create a new one")
        if self._start_task is None:
            self._start_task = asyncio.ensure_future(call(self._create))
        try:
            await asyncio.shield(self._start_task)
        except asyncio.CancelledError:
            await self.stop()  # the container may appear after all: do not leave it
            raise
        if self._limits is None:
            self._limits = DockerLimitWatch(self)
            await self._limits.start()

    def _create(self) -> None:
        client = shared_client()
        cfg = self.config
        try:
            image = client.images.get(cfg.image)
        except docker.errors.ImageNotFound:
            how = (
                "build it with scripts/build-image.sh"
                if cfg.image == DEFAULT_IMAGE
                else f"pull or build it first (docker pull {cfg.image})"
            )
            raise ImageMissing(f"Docker image {cfg.image!r} is not on this engine; {how}") from None
        except docker.errors.DockerException as e:
            raise RuntimeUnavailable(f"no Docker engine answers ({e}); {ENGINE_HINT}") from None
        mounts = [
            docker.types.Mount(m.target, m.source, type="bind", read_only=m.read_only)
            for m in cfg.mounts
        ]
        # The box has no network, so a session's tool bridge and model proxy reach it as
        # Unix sockets in this private (0700) host directory; the bearer tokens still
        # guard them. Per box, so a parked box keeps it for the next session.
        self._channel = Path(tempfile.mkdtemp(prefix=box_dir_prefix()))
        mounts.append(docker.types.Mount(CHANNEL_IN_BOX, str(self._channel), type="bind"))
        if cfg.read_only and all(m.target != cfg.workdir for m in cfg.mounts):
            # Anonymous, so the engine seeds it from the image's workdir (its files and
            # owner) and removes it with the container (v=True).
            mounts.append(docker.types.Mount(cfg.workdir, None, type="volume"))
        from episodes.runtimes.docker.bundle import BUNDLE_IN_BOX, bundle_for

        # Made once per host (a lock keeps concurrent boxes waiting); any image but ours.
        bundle = bundle_for(cfg.runtime_bundle, image.labels)
        if bundle is not None:
            mounts.append(
                docker.types.Mount(BUNDLE_IN_BOX, str(bundle), type="bind", read_only=True)
            )
            self.box_python, self.box_episodes = f"{BUNDLE_IN_BOX}/python3", BUNDLE_IN_BOX
        owned.add(self.name)  # before create: a crash right after must still clean up
        container = client.containers.run(
            cfg.image,
            ["sleep", "infinity"],
            entrypoint=[],
            user=CONTROL_USER,  # whatever USER the image names (see cap_add)
            name=self.name,
            detach=True,
            init=True,
            network_mode=cfg.network,
            # The container's own user stays root, for the worker's control execs alone
            # (sweeps, signals): CAP_KILL lets them end the box user's and the relay's
            # processes. The engine gives an exec as any other user no capabilities.
            cap_drop=["ALL"] if cfg.capabilities == "minimal" else None,
            cap_add=["KILL"] if cfg.capabilities == "minimal" else None,
            security_opt=["no-new-privileges"],
            read_only=cfg.read_only,
            # The box's limits (`cfg.limits`): the engine's cgroup holds memory (no
            # swap beyond it), processes and CPU; the disk limit sizes /tmp.
            tmpfs=(
                {"/tmp": f"rw,nosuid,nodev,mode=1777,size={cfg.limits.disk}"}
                if cfg.read_only
                else {}
            ),
            pids_limit=cfg.limits.processes,
            mem_limit=cfg.limits.memory,
            memswap_limit=cfg.limits.memory,
            nano_cpus=int(cfg.limits.cpus * 1e9),
            ulimits=[docker.types.Ulimit(name="nofile", soft=OPEN_FILES, hard=OPEN_FILES)],
            environment=dict(cfg.env),
            working_dir=cfg.workdir,
            mounts=mounts,
            labels=self.labels,
        )
        self.id = container.id
        self.api = client.api

    async def alive(self) -> bool:
        if self._stopped or self.api is None:
            return False
        try:
            info = await call(self.api.inspect_container, self.name)
        except Exception:  # gone, or the engine does not answer: either way not usable
            return False
        return bool(info["State"]["Running"])

    async def limit_exceeded(self) -> str | None:
        return await self._limits.exceeded() if self._limits is not None else None

    async def box_lost(self) -> str | None:
        """The container is gone or stopped, and not by us nor by its memory limit (a
        box past its limit is `limit_exceeded`, asked first): removed from outside, the
        engine restarted, the node drained. A process inside cannot stop the container
        (its PID 1 ignores the signals it could send), so a stopped one was stopped
        from outside."""
        if self._stopped or self.api is None:
            return None
        try:
            info = await call(self.api.inspect_container, self.name)
        except docker.errors.NotFound:
            return f"the container {self.name} was removed from outside"
        except Exception as e:  # the engine itself: restarting, gone
            why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            return f"the Docker engine does not answer for {self.name}: {why}"
        state = info.get("State") or {}
        if state.get("Running") or state.get("OOMKilled"):
            return None
        if state.get("Status") == "removing":
            return f"the container {self.name} was removed from outside"
        return (
            f"the container {self.name} was stopped from outside "
            f"({state.get('Status', 'not running')}, exit code {state.get('ExitCode')})"
        )

    async def open_process(
        self,
        argv: list[str],
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        *,
        user: str | None = None,
    ) -> DockerProcess:
        if self._stopped or self.api is None:
            raise RuntimeError(f"docker runtime {self.name} is not running")
        if not argv:
            raise ValueError("argv must not be empty")
        wrapped = [*WRAPPER, *argv]
        environment = [f"{k}={v}" for k, v in (env or {}).items()]

        def start() -> tuple[str, Any]:
            exec_id = self.api.exec_create(
                self.name,
                wrapped,
                stdin=True,
                stdout=True,
                stderr=True,
                tty=False,
                environment=environment,
                workdir=cwd or self.config.workdir,
                user=user or self.config.user,
            )["Id"]
            return exec_id, self.api.exec_start(exec_id, socket=True, demux=False)

        try:
            exec_id, sock = await call(start)
        except docker.errors.APIError as e:
            raise RuntimeError(f"docker runtime {self.name} cannot run processes: {e}") from None
        process = DockerProcess(self, exec_id, sock)
        await process.wait_started()
        return process

    async def open_relay(self, argv: list[str]) -> DockerProcess:
        # As the channel directory's owner: with every capability dropped, the box's
        # root gets into a 0700 directory only if it is the same uid (a non-root worker).
        return await self.open_process(argv, {}, None, user=f"{os.getuid()}:{os.getgid()}")

    async def exec_quiet(self, cmd: list[str]) -> int | None:
        """Run `cmd` in the box to its end; its exit code (None if it did not end in time).

        Waiting matters: a kill must have landed when kill() returns, and a sweep
        must be over before the box is parked."""

        def run() -> int | None:
            exec_id = self.api.exec_create(
                self.name, cmd, stdout=False, stderr=False, user=CONTROL_USER
            )["Id"]
            self.api.exec_start(exec_id)  # without streams it returns once started
            deadline = time.monotonic() + _QUIET_EXEC_S
            while (info := self.api.exec_inspect(exec_id))["Running"]:
                if time.monotonic() > deadline:
                    return None
                time.sleep(0.02)
            return info["ExitCode"]

        return await call(run)

    async def sweep(self) -> bool:
        # The whole box, not only the execs we opened: a harness's daemon that left
        # its session and lost its parent is found by nothing else (issue 11).
        if self._stopped or self.api is None:
            return False
        try:
            return await self.exec_quiet(["/bin/sh", "-c", BOX_SWEEPER]) == 0
        except Exception as e:
            log.warning("could not sweep container %s: %s", self.name, e)
            return False

    async def sweep_orphans(self) -> bool:
        # Leftovers only (ORPHAN_SWEEPER): a live harness and the relay go on.
        if self._stopped or self.api is None:
            return False
        try:
            return await self.exec_quiet(["/bin/sh", "-c", ORPHAN_SWEEPER]) == 0
        except Exception as e:
            log.warning("could not sweep leftovers in container %s: %s", self.name, e)
            return False

    async def _teardown(self) -> None:
        if self._limits is not None:
            await self._limits.stop()
        if self._start_task is None:
            return
        with contextlib.suppress(BaseException):
            await self._start_task
        if self._channel is not None:
            shutil.rmtree(self._channel, ignore_errors=True)
        if self.name not in owned:
            return  # never created (engine down, image missing)
        try:
            await call(remove, shared_client().api, self.name)
        except Exception as e:
            # The engine may be briefly unreachable; cleanup_orphans and the atexit
            # backstop still know the label / name.
            log.warning("could not remove container %s: %s", self.name, e)
            return
        owned.discard(self.name)
