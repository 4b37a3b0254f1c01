"""The seccomp filter of a sandbox box: system calls a harness has no use for fail.

The list is Docker's: the table "Significant syscalls blocked by the default profile"
of Docker's seccomp documentation (docs.docker.com/engine/security/seccomp/, the
profile itself being moby/profiles seccomp/default.json), less `clone` (Docker filters
its namespace flags; the box already cannot make user namespaces, `--disable-userns`,
and has no capability for the others) and less the NUMA calls (`get_mempolicy`,
`mbind`, `set_mempolicy`, `move_pages`: Docker lets a container with CAP_SYS_NICE have
them, and numerical libraries probe them), plus the new mount API
(`fsopen`... `mount_setattr`), which Docker's allowlist never grants without
CAP_SYS_ADMIN either. Each fails with EPERM, as under Docker; a call of another
architecture's ABI (i386, x32) kills the process (libseccomp's default).

The filter is compiled on the worker by libseccomp (the system's libseccomp.so.2,
through ctypes) into a BPF program that bwrap installs in the box (`--seccomp FD`)
just before it runs the box's first process. A worker without libseccomp runs boxes
without the filter (`episodes doctor` says so).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os
import tempfile

DENIED = (
    # Docker's table, in its order.
    "acct",
    "add_key",
    "bpf",
    "clock_adjtime",
    "clock_settime",
    "create_module",
    "delete_module",
    "finit_module",
    "get_kernel_syms",
    "init_module",
    "ioperm",
    "iopl",
    "kcmp",
    "kexec_file_load",
    "kexec_load",
    "keyctl",
    "lookup_dcookie",
    "mount",
    "name_to_handle_at",
    "nfsservctl",
    "open_by_handle_at",
    "perf_event_open",
    "pivot_root",
    "process_vm_readv",
    "process_vm_writev",
    "ptrace",
    "query_module",
    "quotactl",
    "reboot",
    "request_key",
    "setns",
    "settimeofday",
    "stime",
    "swapon",
    "swapoff",
    "sysfs",
    "_sysctl",
    "umount",
    "umount2",
    "unshare",
    "uselib",
    "userfaultfd",
    "ustat",
    "vm86",
    "vm86old",
    # The new mount API.
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
)

_SCMP_ACT_ALLOW = 0x7FFF0000
_SCMP_ACT_ERRNO = 0x00050000


@functools.cache
def _lib() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError:
        return None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return lib


@functools.cache
def program() -> bytes | None:
    """The compiled BPF program (raw `struct sock_filter`s, as bwrap reads them), or
    None without libseccomp."""
    lib = _lib()
    if lib is None:
        return None
    ctx = lib.seccomp_init(_SCMP_ACT_ALLOW)
    if not ctx:
        return None
    try:
        for name in DENIED:
            nr = lib.seccomp_syscall_resolve_name(name.encode())
            if nr < 0:  # not a call of this architecture (vm86 on x86_64...)
                continue
            if lib.seccomp_rule_add(ctx, _SCMP_ACT_ERRNO | errno.EPERM, nr, 0) < 0:
                return None
        with tempfile.TemporaryFile() as f:
            if lib.seccomp_export_bpf(ctx, f.fileno()) < 0:
                return None
            f.seek(0)
            return f.read()
    finally:
        lib.seccomp_release(ctx)


def program_fd() -> int | None:
    """A readable fd holding the program, for bwrap's `--seccomp` (the caller passes it
    on and closes it), or None without libseccomp."""
    data = program()
    if data is None:
        return None
    r, w = os.pipe()
    try:
        os.write(w, data)  # a few hundred bytes: far below a pipe's buffer
    finally:
        os.close(w)
    return r
