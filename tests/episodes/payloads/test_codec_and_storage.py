"""AES-GCM codec (round trip, rotation, unknown keys), the local driver, and the composition."""

from __future__ import annotations

import base64
import hashlib
import os
import time
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import StorageDriverClaim, StorageDriverRetrieveContext
from temporalio.converter import StorageDriverStoreContext as StoreContext

from episodes.errors import LocalPayloadMissing
from episodes.payloads import (
    AesGcmCodec,
    AesGcmEncryption,
    LocalDirectoryDriver,
    LocalStorage,
    PayloadDecryptError,
    PayloadKeyError,
    PayloadsConfig,
    data_converter,
    prune_local_payloads,
)
from episodes.payloads.codec import ENCODING, KEY_ID_KEY

KEY_A = ("a", b"A" * 32)
KEY_B = ("b", b"B" * 32)
SECRET = "PLAINTEXT-MARKER-do-not-leak"


def plain(text: str) -> Payload:
    return pydantic_data_converter.payload_converter.to_payloads([text])[0]


async def test_round_trip_hides_content_and_encoding() -> None:
    codec = AesGcmCodec([KEY_A])
    original = plain(SECRET)
    [enc] = await codec.encode([original])
    assert enc.metadata["encoding"] == ENCODING
    assert enc.metadata[KEY_ID_KEY] == b"a"
    assert SECRET.encode() not in enc.SerializeToString()
    assert b"json/plain" not in enc.SerializeToString()  # the inner encoding is sealed too
    [dec] = await codec.decode([enc])
    assert dec == original
    [again] = await codec.encode([original])
    assert again.data != enc.data  # fresh nonce every time


async def test_rotation_old_payloads_decode_new_ones_use_the_first_key() -> None:
    [old] = await AesGcmCodec([KEY_A]).encode([plain("old turn")])
    rotated = AesGcmCodec([KEY_B, KEY_A])
    [new] = await rotated.encode([plain("new turn")])
    assert new.metadata[KEY_ID_KEY] == b"b"
    assert await rotated.decode([old, new]) == [plain("old turn"), plain("new turn")]
    # Once A is dropped, its payloads fail with an error naming the missing key id.
    with pytest.raises(
        PayloadKeyError, match=r"key id 'a', which is not configured \(configured: b\)"
    ):
        await AesGcmCodec([KEY_B]).decode([old])


async def test_wrong_key_under_the_same_id_and_relabelling_fail_authentication() -> None:
    [enc] = await AesGcmCodec([KEY_A]).encode([plain(SECRET)])
    with pytest.raises(PayloadDecryptError, match="key id 'a' failed authentication") as e:
        await AesGcmCodec([("a", b"Z" * 32)]).decode([enc])
    assert base64.b64encode(b"Z" * 32).decode() not in str(e.value)
    relabelled = Payload()
    relabelled.CopyFrom(enc)
    relabelled.metadata[KEY_ID_KEY] = b"b"
    with pytest.raises(PayloadDecryptError):
        await AesGcmCodec([("b", KEY_A[1])]).decode([relabelled])


async def test_unencrypted_payloads_pass_through_decode() -> None:
    p = plain("written before encryption was turned on")
    assert await AesGcmCodec([KEY_A]).decode([p]) == [p]


async def test_local_driver_round_trip_and_content_addressing(tmp_path: Path) -> None:
    driver = LocalDirectoryDriver(tmp_path)
    a, b = plain("x" * 1000), plain("y" * 1000)
    claims = await driver.store(StoreContext(), [a, b, a])
    digests = [c.claim_data["hash_value"] for c in claims]
    assert digests[0] == digests[2] != digests[1]
    assert digests[0] == hashlib.sha256(a.SerializeToString()).hexdigest()
    assert driver.path_for(digests[0]).read_bytes() == a.SerializeToString()
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == sorted(set(digests))
    ctx = StorageDriverRetrieveContext()
    assert await driver.retrieve(ctx, claims) == [a, b, a]
    # The directory can move: claims hold digests, not paths.
    moved = tmp_path.parent / (tmp_path.name + "-moved")
    tmp_path.rename(moved)
    assert await LocalDirectoryDriver(moved).retrieve(ctx, claims[:1]) == [a]


async def test_local_driver_errors_name_the_missing_key_and_refuse_paths(tmp_path: Path) -> None:
    driver = LocalDirectoryDriver(tmp_path)
    missing = StorageDriverClaim({"hash_algorithm": "sha256", "hash_value": "ab" * 32})
    with pytest.raises(LocalPayloadMissing, match=f"sha256:{'ab' * 32} is not in {tmp_path}"):
        await driver.retrieve(StorageDriverRetrieveContext(), [missing])
    escape = StorageDriverClaim({"hash_algorithm": "sha256", "hash_value": "../../etc/passwd"})
    with pytest.raises(ValueError, match="not a sha256 hex digest"):
        await driver.retrieve(StorageDriverRetrieveContext(), [escape])
    [claim] = await driver.store(StoreContext(), [plain("z" * 100)])
    driver.path_for(claim.claim_data["hash_value"]).write_bytes(b"tampered")
    with pytest.raises(ValueError, match="is corrupt"):
        await driver.retrieve(StorageDriverRetrieveContext(), [claim])


async def test_prune_by_age(tmp_path: Path) -> None:
    driver = LocalDirectoryDriver(tmp_path)
    old, fresh = await driver.store(StoreContext(), [plain("old" * 100), plain("new" * 100)])
    old_path = driver.path_for(old.claim_data["hash_value"])
    week_ago = time.time() - 7 * 86400
    os.utime(old_path, (week_ago, week_ago))
    assert prune_local_payloads(tmp_path, older_than_s=86400, dry_run=True).files == 1
    assert old_path.exists()
    result = prune_local_payloads(tmp_path, older_than_s=86400)
    assert result.files == 1 and result.bytes > 300
    assert not old_path.exists()
    assert driver.path_for(fresh.claim_data["hash_value"]).exists()


def encrypted_local(tmp_path: Path, threshold: int, keys: str) -> tuple[PayloadsConfig, dict]:
    env = {"KEYS": keys}
    cfg = PayloadsConfig(
        storage=LocalStorage(path=tmp_path / "payloads", threshold_bytes=threshold),
        encryption=AesGcmEncryption(keys_env="KEYS"),
    )
    return cfg, env


async def test_converter_encrypts_before_storing(tmp_path: Path) -> None:
    keys = "k1:" + base64.b64encode(KEY_A[1]).decode()
    cfg, env = encrypted_local(tmp_path, 1024, keys)
    dc = data_converter(cfg, environ=env)
    big = SECRET + "-" + "transcript " * 500
    small = SECRET + " small"
    payloads = await dc.encode([big, small])
    ref, inline = payloads
    # The big one left the history as a reference; the small one stayed, encrypted.
    assert ref.metadata["encoding"] == b"json/protobuf"
    assert ref.external_payloads[0].size_bytes > 1024
    assert inline.metadata["encoding"] == ENCODING
    for p in payloads:
        assert SECRET.encode() not in p.SerializeToString()
    # The stored blob is ciphertext: the codec ran before the driver.
    [blob] = [p for p in (tmp_path / "payloads").rglob("*") if p.is_file()]
    stored = Payload()
    stored.ParseFromString(blob.read_bytes())
    assert stored.metadata["encoding"] == ENCODING
    assert SECRET.encode() not in blob.read_bytes()
    assert await dc.decode(payloads, [str, str]) == [big, small]


def test_no_storage_no_encryption_is_the_projects_converter_unchanged() -> None:
    assert data_converter(PayloadsConfig()) is pydantic_data_converter
    cfg, env = encrypted_local(Path("/unused"), 10, "k:" + base64.b64encode(KEY_A[1]).decode())
    dc = data_converter(cfg, environ=env)
    assert dc.payload_converter_class is pydantic_data_converter.payload_converter_class
