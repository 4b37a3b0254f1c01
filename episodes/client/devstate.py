"""Which dev server is this checkout's: `.episodes/server.json`, written by the process
that started it (`episodes dev`, `episodes run` without an address, `make demo`).

Two checkouts on one machine each keep their histories in their own `.episodes/`; a
server on 127.0.0.1:7233 may be the other one's. An embedded run reuses only the server
this file names (its owner alive, its port answering); any other server is not ours,
and its queue's workers are not ours either (issue 27: one checkout's worker took the
other's demo provisions). Readers with no address configured (`episodes show`, `view`,
`export`, `worker`) connect to it too, wherever its ports ended up.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from episodes.client.devserver import DevServer, port_open
from episodes.payloads.settings import DEV_STATE_DIR

STATE_FILE = "server.json"


@dataclass(frozen=True)
class RunningServer:
    address: str
    ui_url: str | None
    owner_pid: int
    # `episodes dev`'s: runs may use it beside it. An embedded run's stops with the run.
    shared: bool = False

    @property
    def port(self) -> int:
        return int(self.address.rsplit(":", 1)[1])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def running_server(state_dir: Path = DEV_STATE_DIR) -> RunningServer | None:
    """This checkout's dev server when its owner is alive and its port answers, else None."""
    try:
        data = json.loads((state_dir / STATE_FILE).read_text())
        found = RunningServer(
            address=str(data["address"]),
            ui_url=data.get("ui_url"),
            owner_pid=int(data["owner_pid"]),
            shared=bool(data.get("shared", False)),
        )
        host = found.address.rsplit(":", 1)[0]
        if _alive(found.owner_pid) and port_open(host, found.port):
            return found
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        pass
    return None


def record_server(server: DevServer, *, shared: bool, state_dir: Path = DEV_STATE_DIR) -> None:
    """Name `server` (started by this process) as this checkout's; `shared`: others may
    use it while this process runs (`episodes dev`)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    data = {
        "address": server.address,
        "ui_url": server.ui_url,
        "owner_pid": os.getpid(),
        "shared": shared,
    }
    tmp = state_dir / f".{STATE_FILE}.{os.getpid()}"
    tmp.write_text(json.dumps(data) + "\n")
    tmp.replace(state_dir / STATE_FILE)


def forget_server(state_dir: Path = DEV_STATE_DIR) -> None:
    """Remove the record if this process wrote it (its server is stopping)."""
    path = state_dir / STATE_FILE
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        if int(json.loads(path.read_text())["owner_pid"]) == os.getpid():
            path.unlink()


def local_address(state_dir: Path = DEV_STATE_DIR) -> str | None:
    """The address of this checkout's running dev server, if any."""
    found = running_server(state_dir)
    return found.address if found else None
