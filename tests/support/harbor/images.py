"""The base images the test tasks build FROM (no registry is reachable): the harness
image (scripts/build-image.sh), and a busybox rootfs with no Python, made here with
`docker import` from Debian's busybox-static (CI installs it: .ci/run)."""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile

BUSYBOX_IMAGE = "episodes-test-busybox:latest"


def busybox_reason() -> str | None:
    """Why the busybox base cannot be had here, or None once it is on the engine."""
    from tests.support.backends import docker as backend

    api = backend.client().api
    try:
        api.inspect_image(BUSYBOX_IMAGE)
        return None
    except Exception:
        pass
    busybox = shutil.which("busybox")
    if busybox is None:
        return "no busybox here (apt-get install busybox-static)"
    names = subprocess.run([busybox, "--list"], capture_output=True, text=True, check=False)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:

        def add_dir(name: str, mode: int = 0o755) -> None:
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, mode
            tar.addfile(info)

        def add_file(name: str, data: bytes, mode: int = 0o644) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))

        for d in ("bin", "etc", "root", "work"):
            add_dir(d)
        add_dir("tmp", 0o1777)
        with open(busybox, "rb") as f:
            add_file("bin/busybox", f.read(), 0o755)
        for name in names.stdout.split():
            if name != "busybox":
                link = tarfile.TarInfo(f"bin/{name}")
                link.type, link.linkname = tarfile.SYMTYPE, "busybox"
                tar.addfile(link)
        add_file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n")
        add_file("etc/group", b"root:x:0:\n")
    api.import_image_from_data(
        buf.getvalue(),
        repository=BUSYBOX_IMAGE.split(":")[0],
        tag="latest",
        changes=["ENV PATH=/bin", "WORKDIR /"],
    )
    # A dynamically linked busybox would not run without its libc: say so, not fail later.
    probe = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--network",
            "none",
            BUSYBOX_IMAGE,
            "/bin/sh",
            "-c",
            "command -v python3 || echo no-python",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.stdout.strip() != "no-python":
        api.remove_image(BUSYBOX_IMAGE, force=True)
        return f"the busybox base does not run as expected ({probe.stdout}{probe.stderr}); is busybox static?"
    return None
