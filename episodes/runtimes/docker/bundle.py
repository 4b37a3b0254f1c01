"""The runtime bundle: a Python and this package's in-box programs for any image.

A task's image is arbitrary (a Harbor task may be busybox, Alpine's musl, a distro
with no Python at all), but some things must run in its box: the in-box relay that
serves the tools and the model, the stdio tunnel's end, the built-in `oracle` and
`nop` harnesses. The Docker runtime mounts this bundle read-only at
`/opt/episodes-runtime` in every box whose image is not the project's own
(`DockerConfig.runtime_bundle`, `bundle_for`), and runs them with it:

    /opt/episodes-runtime/python3 -I PROGRAM     # a /bin/sh wrapper that runs
    <bundle>/lib/ld-linux-*.so.2 --library-path <bundle>/lib <bundle>/bin/python3 ...

The bundle brings its own dynamic loader and every shared library Python and its
stdlib extensions need (glibc included), so it runs whatever the image's libc is;
`--library-path` applies to that process alone (no LD_LIBRARY_PATH), so the programs
it starts (a task's solve.sh) run on the image's own libraries, untouched. Python
finds its stdlib next to its binary (`-I` ignores PYTHONHOME, which we do not set).

Made once per worker host, from the locally built `episodes-harness:latest` image
(scripts/build-image.sh: Debian's python3), into the cache directory, keyed by that
image's id and the in-box files: a new image or a changed relay makes a new bundle.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import tempfile
from pathlib import Path

from episodes.errors import ImageMissing, RuntimeUnavailable

log = logging.getLogger(__name__)

BUNDLE_IN_BOX = "/opt/episodes-runtime"
# What scripts/build-image.sh labels its images with (and images FROM them inherit):
# they have their own python3 and /opt/episodes, and need no bundle.
PROJECT_IMAGE_LABEL = "episodes.harness.hash"
SOURCE_IMAGE = os.environ.get("EPISODES_BUNDLE_IMAGE", "episodes-harness:latest")
# The package's stdlib-only programs the box may run, relative to the package's parent.
IN_BOX_FILES = (
    "episodes/harness/sdk.py",
    "episodes/harness/reference/oracle.py",
    "episodes/harness/reference/nop.py",
    "episodes/tunnel/relay.py",
    "episodes/tunnel/stdio_relay.py",
)
_PACKAGE_ROOT = Path(__file__).resolve().parents[3]

# Runs in a container of SOURCE_IMAGE with the new bundle directory at /out: the
# interpreter, its stdlib (compiled: the mount is read-only), the loader and every
# library `ldd` names for the interpreter and its extension modules.
_EXTRACT = r"""set -eu
O=/out
V=$(python3 -c 'import sys; print("python%d.%d" % sys.version_info[:2])')
mkdir -p "$O/bin" "$O/lib"
cp -L "$(command -v python3)" "$O/bin/python3"
cp -R --preserve=mode,timestamps "/usr/lib/$V" "$O/lib/$V"
cd "$O/lib/$V" && rm -rf test idlelib tkinter ensurepip lib2to3 turtledemo pydoc_data \
    config-* site-packages dist-packages
python3 -m compileall -q -j 0 "$O/lib/$V" >/dev/null 2>&1 || true
for f in "$(command -v python3)" /usr/lib/$V/lib-dynload/*.so; do ldd "$f"; done |
    awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\/.*ld-linux/ { print $1 }' |
    sort -u | while read -r l; do cp -L "$l" "$O/lib/"; done
ls "$O/lib" | grep '^ld-linux' | head -n 1 > "$O/loader"
"""

# The one name a box uses for the bundle's Python.
_WRAPPER = """#!/bin/sh
d=${0%/*}
exec "$d/lib/LOADER" --library-path "$d/lib" "$d/bin/python3" "$@"
"""


def bundle_for(setting: bool | None, image_labels: dict[str, str] | None) -> Path | None:
    """The bundle to mount in a box of an image with these labels, per
    `DockerConfig.runtime_bundle` (None: any image but the project's). Blocking.

    Unasked (None) and not to be had (no SOURCE_IMAGE on the engine), the box goes
    without: its harness may need no relay; one that does fails to start naming it."""
    if setting is False or (setting is None and PROJECT_IMAGE_LABEL in (image_labels or {})):
        return None
    try:
        return ensure_bundle()
    except ImageMissing as e:
        if setting:
            raise
        log.warning("no runtime bundle for this box: %s", e)
        return None


def cache_dir() -> Path:
    return Path(os.environ.get("EPISODES_CACHE", Path.home() / ".cache" / "episodes"))


def ensure_bundle() -> Path:
    """The bundle's host directory, made now if this host has none for the current image
    and files (blocking: call it from a thread). Safe across processes (a file lock)."""
    from episodes.runtimes.docker.engine import docker, shared_client

    client = shared_client()
    try:
        image = client.images.get(SOURCE_IMAGE)
    except docker.errors.ImageNotFound:
        raise ImageMissing(
            f"the runtime bundle is made from {SOURCE_IMAGE!r}, which is not on this engine; "
            "build it with scripts/build-image.sh"
        ) from None
    digest = hashlib.sha256(image.id.encode())
    for name in IN_BOX_FILES:
        digest.update(name.encode() + b"\0" + (_PACKAGE_ROOT / name).read_bytes())
    digest.update(_EXTRACT.encode() + _WRAPPER.encode())
    cache = cache_dir()
    final = cache / f"runtime-bundle-{digest.hexdigest()[:16]}"
    if (final / "python3").exists():
        return final
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "runtime-bundle.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker on this host may be making it
        if (final / "python3").exists():
            return final
        work = Path(tempfile.mkdtemp(prefix="runtime-bundle-", dir=cache))
        try:
            _extract(client, work)
            os.rename(work, final)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
    return final


def _extract(client: object, work: Path) -> None:
    from episodes.runtimes.docker.engine import docker

    os.chmod(work, 0o755)
    try:
        client.containers.run(  # type: ignore[attr-defined]
            SOURCE_IMAGE,
            ["/bin/sh", "-c", _EXTRACT],
            entrypoint=[],
            user=f"{os.getuid()}:{os.getgid()}",
            network_mode="none",
            volumes={str(work): {"bind": "/out", "mode": "rw"}},
            remove=True,
            labels={"episodes.bundle": "extract"},
        )
    except docker.errors.ContainerError as e:
        raw = e.stderr or b""
        detail = (raw.decode(errors="replace") if isinstance(raw, bytes) else raw).strip()[-500:]
        raise RuntimeUnavailable(f"making the runtime bundle failed: {detail}") from None
    loader = (work / "loader").read_text().strip()
    if not loader:
        raise RuntimeUnavailable(f"the runtime bundle from {SOURCE_IMAGE} has no dynamic loader")
    wrapper = work / "python3"
    wrapper.write_text(_WRAPPER.replace("LOADER", loader))
    wrapper.chmod(0o755)
    for name in IN_BOX_FILES:
        target = work / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_PACKAGE_ROOT / name, target)
    # Empty package files: the host's may import pydantic, the box has only the stdlib.
    for package in (
        "episodes",
        "episodes/harness",
        "episodes/harness/reference",
        "episodes/tunnel",
    ):
        (work / package / "__init__.py").write_text("")
    for path in (work, *work.rglob("*")):
        with contextlib.suppress(OSError):
            mode = path.stat().st_mode
            path.chmod(mode | 0o444 | (0o111 if path.is_dir() or mode & 0o100 else 0))
