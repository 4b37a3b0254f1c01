"""A storage driver that keeps payloads as content-addressed files in one directory.

For `episodes dev` / `make demo` and single-host setups: `<root>/sha256/<ab>/<digest>`
holds the serialized (already encrypted, when encryption is on) Payload. The claim
in the history carries only the digest, never a path, so a history cannot point the
driver (or the codec server) at a file outside its directory, and the directory can
move. Nothing deletes these files automatically: `prune_local_payloads` does, by age.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)

from episodes.errors import LocalPayloadMissing

DRIVER_NAME = "episodes.local"
_DIGEST = re.compile(r"^[0-9a-f]{64}$")


class LocalDirectoryDriver(StorageDriver):
    def __init__(self, root: str | os.PathLike[str], *, name: str = DRIVER_NAME):
        self.root = Path(root)
        self._name = name

    def name(self) -> str:
        return self._name

    def type(self) -> str:
        return "episodes.local"

    def path_for(self, digest: str) -> Path:
        if not _DIGEST.match(digest):
            raise ValueError(f"not a sha256 hex digest: {digest[:80]!r}")
        return self.root / "sha256" / digest[:2] / digest

    def _store_one(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        path = self.path_for(digest)
        if path.exists():
            # Same bytes, same file. Touch it so age-based pruning counts from the
            # latest history that refers to it, not the first.
            os.utime(path)
            return digest
        path.parent.mkdir(parents=True, exist_ok=True)
        # Write beside the target and rename: a reader (another worker, the codec
        # server) sees either no file or the whole file, never a partial one.
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{digest[:8]}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return digest

    def _retrieve_one(self, claim: StorageDriverClaim) -> Payload:
        digest = claim.claim_data.get("hash_value", "")
        algorithm = claim.claim_data.get("hash_algorithm", "")
        if algorithm != "sha256":
            raise ValueError(f"{self._name}: unsupported hash algorithm {algorithm!r}")
        path = self.path_for(digest)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise LocalPayloadMissing(
                f"stored payload sha256:{digest} is not in {self.root} "
                "(pruned, or this worker uses another payloads directory)"
            ) from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise ValueError(f"stored payload sha256:{digest} in {self.root} is corrupt")
        payload = Payload()
        payload.ParseFromString(data)
        return payload

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        blobs = [p.SerializeToString() for p in payloads]
        # Off the event loop: a 20 MB write with fsync would stall a worker's other tasks.
        digests = await asyncio.to_thread(lambda: [self._store_one(b) for b in blobs])
        return [
            StorageDriverClaim(claim_data={"hash_algorithm": "sha256", "hash_value": d})
            for d in digests
        ]

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        return await asyncio.to_thread(lambda: [self._retrieve_one(c) for c in claims])


@dataclass(frozen=True)
class PruneResult:
    files: int
    bytes: int


def prune_local_payloads(
    root: str | os.PathLike[str], *, older_than_s: float, dry_run: bool = False
) -> PruneResult:
    """Delete stored payloads not written for `older_than_s` seconds.

    Keep `older_than_s` above the namespace's history retention (plus the longest
    episode): a history still in retention whose payload is gone can no longer be
    read or replayed.
    """
    cutoff = time.time() - older_than_s
    files = size = 0
    base = Path(root) / "sha256"
    if not base.is_dir():
        return PruneResult(0, 0)
    for path in base.glob("*/*"):
        try:
            st = path.stat()
        except FileNotFoundError:
            continue
        # Leftover temp files of a crashed writer are pruned by age too.
        if st.st_mtime < cutoff:
            files += 1
            size += st.st_size
            if not dry_run:
                path.unlink(missing_ok=True)
    return PruneResult(files, size)
