"""S3 storage against a real S3-compatible server (moto's standalone server, a subprocess).

Real HTTP, real aioboto3 client, the SDK's own S3 driver: nothing here mocks a client.
"""

from __future__ import annotations

import base64
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload

from episodes.client.devserver import free_port, port_open
from episodes.lifetime import with_death_signal
from episodes.payloads import AesGcmEncryption, PayloadsConfig, S3Storage, aclose, data_converter
from episodes.payloads.codec import ENCODING

boto3 = pytest.importorskip("boto3")
pytest.importorskip("aioboto3")

SECRET = "PLAINTEXT-MARKER-s3"
KEYS = {"KEYS": "k1:" + base64.b64encode(b"S" * 32).decode()}
BUCKET = "episodes-payloads"


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    log = (tmp_path_factory.mktemp("moto") / "moto.log").open("wb")
    exe = str(Path(sys.executable).parent / "moto_server")
    proc = subprocess.Popen(
        with_death_signal([exe, "-H", "127.0.0.1", "-p", str(port)]), stdout=log, stderr=log
    )
    try:
        deadline = time.monotonic() + 30
        while not port_open("127.0.0.1", port):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"moto_server did not start (exit {proc.poll()}); see {log.name}")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # Credentials come from the standard AWS environment, as in production.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def s3(s3_endpoint: str, aws_env: None):  # type: ignore[no-untyped-def]
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    if BUCKET not in [b["Name"] for b in client.list_buckets()["Buckets"]]:
        client.create_bucket(Bucket=BUCKET)
    return client


def s3_config(endpoint: str, prefix: str, threshold: int = 1024) -> PayloadsConfig:
    return PayloadsConfig(
        storage=S3Storage(
            bucket=BUCKET,
            prefix=prefix,
            endpoint_url=endpoint,
            region="us-east-1",
            threshold_bytes=threshold,
        ),
        encryption=AesGcmEncryption(keys_env="KEYS"),
    )


def object_keys(s3, prefix: str) -> list[str]:  # type: ignore[no-untyped-def]
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
    return [o["Key"] for o in listed]


async def test_s3_round_trip_stores_ciphertext_under_the_prefix(s3, s3_endpoint: str) -> None:  # type: ignore[no-untyped-def]
    dc = data_converter(s3_config(s3_endpoint, "team-a/episodes"), environ=KEYS)
    big = SECRET + " " + "tool output " * 2000
    try:
        payloads = await dc.encode([big, "small"])
        ref, inline = payloads
        assert ref.metadata["messageType"] == b"temporal.api.sdk.v1.ExternalStorageReference"
        assert inline.metadata["encoding"] == ENCODING
        [key] = object_keys(s3, "team-a/episodes/")
        assert key.startswith("team-a/episodes/v0/")
        assert key.encode() in ref.data  # the claim holds the full, prefixed key
        blob = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        stored = Payload()
        stored.ParseFromString(blob)
        assert stored.metadata["encoding"] == ENCODING
        assert SECRET.encode() not in blob
        assert await dc.decode(payloads, [str, str]) == [big, "small"]
        # Same bytes are not uploaded twice (the SDK driver checks first).
        assert len(object_keys(s3, "team-a/")) == 1
    finally:
        await aclose(dc)

    # A later prefix change does not orphan existing histories: claims carry the key.
    moved = data_converter(s3_config(s3_endpoint, "team-b"), environ=KEYS)
    try:
        assert await moved.decode(payloads, [str, str]) == [big, "small"]
    finally:
        await aclose(moved)


async def test_s3_errors_name_bucket_and_key(s3, s3_endpoint: str) -> None:  # type: ignore[no-untyped-def]
    dc = data_converter(s3_config(s3_endpoint, "errs"), environ=KEYS)
    try:
        payloads = await dc.encode(["x" * 5000])
        for key in object_keys(s3, "errs/"):
            s3.delete_object(Bucket=BUCKET, Key=key)
        with pytest.raises(
            RuntimeError, match=r"retrieve failed \[bucket=episodes-payloads, key=errs/v0/"
        ):
            await dc.decode(payloads, [str])
    finally:
        await aclose(dc)
    cfg = PayloadsConfig(
        storage=S3Storage(bucket="no-such-bucket", endpoint_url=s3_endpoint, threshold_bytes=0)
    )
    missing = data_converter(cfg)
    try:
        with pytest.raises(RuntimeError, match=r"store failed \[bucket=no-such-bucket"):
            await missing.encode(["anything"])
    finally:
        await aclose(missing)
