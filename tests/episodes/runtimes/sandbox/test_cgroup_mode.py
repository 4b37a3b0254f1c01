"""Where the sandbox makes its boxes' cgroups, and the one line that says which mode
bounds them and why (issue 40 §1), on a fake cgroupfs: the layouts a delegated worker
meets (systemd's `Delegate=yes`, the worker image's entrypoint) cannot all be made on
the machine the tests run on."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from episodes.runtimes.sandbox import cgroup
from episodes.types.runtime import Limits


def _v2(root: Path, own: str, monkeypatch, *, busy: bool) -> Path:
    """A cgroup v2 tree at `root` with the worker in `own`; `busy`: its own cgroup
    holds processes, so enabling controllers for its children fails (EBUSY)."""
    (root / "cgroup.controllers").write_text("cpu memory pids\n")
    here = root / own.lstrip("/")
    here.mkdir(parents=True, exist_ok=True)
    (here / "cgroup.subtree_control").write_text("")
    (here / "cgroup.procs").write_text("1\n")
    monkeypatch.setattr(cgroup, "ROOT", root)
    monkeypatch.setattr(cgroup, "_own", lambda controller: own if controller == "" else None)
    real = cgroup._write

    def write(path: Path, value: str) -> None:
        if busy and path == here / "cgroup.subtree_control":
            raise OSError(errno.EBUSY, "Device or resource busy", str(path))
        real(path, value)

    monkeypatch.setattr(cgroup, "_write", write)
    return here


def test_a_worker_in_a_leaf_of_a_delegated_subtree_makes_its_boxes_beside_the_leaf(
    tmp_path, monkeypatch
):
    """The image's entrypoint: the worker in `worker`, memory and pids enabled for the
    namespace root's children, root's files the worker's. Its own cgroup holds
    processes (no controllers for its children), so boxes go beside it."""
    _v2(tmp_path, "/worker", monkeypatch, busy=True)
    (tmp_path / "cgroup.subtree_control").write_text("cpu memory pids\n")
    (tmp_path / "cgroup.procs").write_text("")
    box = cgroup.make("box1", Limits())
    assert box is not None, cgroup.probe()
    assert box.dirs["memory"].parent == tmp_path
    assert (box.dirs["memory"] / "memory.max").read_text() == str(Limits().memory)
    assert cgroup.parents() == [tmp_path]
    how, where = cgroup.probe()
    assert how == "cgroup v2" and str(tmp_path) in where
    line = cgroup.mode_line()
    assert line.startswith("cgroup mode (cgroup v2): memory, processes and CPU"), line


def test_a_delegated_cgroup_of_its_own_is_used_as_before(tmp_path, monkeypatch):
    here = _v2(tmp_path, "/system.slice/w.service", monkeypatch, busy=False)
    writes: list[tuple[Path, str]] = []
    real = cgroup._write
    monkeypatch.setattr(cgroup, "_write", lambda p, v: (writes.append((p, v)), real(p, v)))
    box = cgroup.make("box1", Limits())
    assert box is not None and box.dirs["memory"].parent == here
    assert (here / "cgroup.subtree_control", "+memory +pids") in writes


def test_a_busy_cgroup_without_a_delegated_parent_is_rlimits_mode_saying_why(tmp_path, monkeypatch):
    _v2(tmp_path, "/system.slice/w.service", monkeypatch, busy=True)
    assert cgroup.make("box1", Limits()) is None
    line = cgroup.mode_line()
    assert line.startswith("rlimits mode: "), line
    assert "holds processes" in line and "w.service" in line, line


def test_the_entrypoints_reason_is_the_line_when_it_could_not_delegate(tmp_path, monkeypatch):
    _v2(tmp_path, "/", monkeypatch, busy=True)

    def read_only(*a: object) -> None:
        raise cgroup.NoCgroup("/sys/fs/cgroup is read-only (a container's cgroupfs)")

    monkeypatch.setattr(cgroup, "_parents", read_only)
    monkeypatch.setenv(
        cgroup.DELEGATION_ENV, "not delegated: remounting /sys/fs/cgroup read-write failed"
    )
    line = cgroup.mode_line()
    assert line.startswith("rlimits mode: not delegated: remounting"), line
    monkeypatch.delenv(cgroup.DELEGATION_ENV)
    assert "read-only" in cgroup.mode_line()


@pytest.mark.parametrize(
    ("errno_", "said"),
    [(errno.EROFS, "is read-only"), (errno.EACCES, "not writable by uid"), (errno.EBUSY, "leaf")],
)
def test_each_refusal_is_said_as_what_a_deployer_can_act_on(errno_, said):
    why = cgroup._why(OSError(errno_, "x"), Path("/sys/fs/cgroup/w"))
    assert "/sys/fs/cgroup/w" in why and said in why, why
