"""Payload config: the models, the env loader and key parsing; every error one line, no key."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from episodes.errors import PayloadsConfigError
from episodes.payloads.codec import new_key_entry
from episodes.payloads.config import (
    DEFAULT_THRESHOLD_BYTES,
    AesGcmEncryption,
    LocalStorage,
    NoEncryption,
    NoStorage,
    PayloadsConfig,
    S3Storage,
    parse_keys,
    payloads_config_from_env,
)

KEY = base64.b64encode(b"k" * 32).decode()


def test_defaults_and_discriminated_unions(tmp_path: Path) -> None:
    assert PayloadsConfig() == PayloadsConfig(storage=NoStorage(), encryption=NoEncryption())
    cfg = PayloadsConfig.parse(
        {
            "storage": {"type": "s3", "bucket": "payloads", "prefix": "episodes/"},
            "encryption": {"type": "aes-gcm", "keys_env": "MY_KEYS"},
        }
    )
    assert isinstance(cfg.storage, S3Storage)
    assert cfg.storage.threshold_bytes == DEFAULT_THRESHOLD_BYTES == 256 * 1024
    assert isinstance(cfg.encryption, AesGcmEncryption)
    local = PayloadsConfig.parse({"storage": {"type": "local", "path": str(tmp_path)}})
    assert local.storage == LocalStorage(path=tmp_path)


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"storage": {"type": "ftp"}}, "storage"),
        ({"storage": {"type": "local"}}, "storage.local.path"),
        ({"storage": {"type": "s3", "bucket": "b" * 3, "secret_key": "x"}}, "secret_key"),
        ({"storage": {"type": "local", "path": "/x", "threshold_bytes": -1}}, "threshold_bytes"),
        ({"encryption": {"type": "aes-gcm"}}, "exactly one of keys_env and keys_file"),
        ({"encryption": {"type": "aes-gcm", "keys": KEY}}, "keys"),
    ],
)
def test_bad_config_is_one_line_naming_the_field(data: object, fragment: str) -> None:
    with pytest.raises(PayloadsConfigError) as e:
        PayloadsConfig.parse(data, source="spec.yaml")
    msg = str(e.value)
    assert msg.startswith("spec.yaml: ") and "\n" not in msg
    assert fragment in msg
    assert KEY not in msg  # a key put in the wrong place is not echoed back


def test_parse_keys_separators_comments_and_order() -> None:
    b = base64.b64encode(b"b" * 16).decode()
    keys = parse_keys(f"# rotated 2025-01\nnew:{KEY}, old:{b}\n\n", source="X")
    assert keys == [("new", b"k" * 32), ("old", b"b" * 16)]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "no payload keys"),
        (KEY, "entry 1 is not id:base64key"),
        (f"a b:{KEY}", "entry 1 is not id:base64key"),
        (f"a:{KEY},a:{KEY}", "'a' appears twice"),
        ("a:not*base64", "'a' is not valid base64"),
        (f"a:{base64.b64encode(b'short').decode()}", "'a' is 5 bytes"),
    ],
)
def test_bad_keys_name_the_source_and_never_the_key(text: str, fragment: str) -> None:
    with pytest.raises(PayloadsConfigError) as e:
        parse_keys(text, source="EPISODES_PAYLOAD_KEYS")
    msg = str(e.value)
    assert msg.startswith("EPISODES_PAYLOAD_KEYS: ") and fragment in msg and "\n" not in msg
    assert KEY not in msg


def test_env_loader_local_s3_and_keys(tmp_path: Path) -> None:
    assert payloads_config_from_env({}) == PayloadsConfig()
    default = LocalStorage(path=tmp_path)
    assert payloads_config_from_env({}, default_storage=default).storage == default
    cfg = payloads_config_from_env(
        {
            "EPISODES_PAYLOADS_STORAGE": "local",
            "EPISODES_PAYLOADS_PATH": str(tmp_path),
            "EPISODES_PAYLOADS_THRESHOLD_BYTES": "1000",
            "EPISODES_PAYLOAD_KEYS": new_key_entry("k1"),
        }
    )
    assert cfg.storage == LocalStorage(path=tmp_path, threshold_bytes=1000)
    assert cfg.encryption == AesGcmEncryption(keys_env="EPISODES_PAYLOAD_KEYS")
    keyfile = tmp_path / "keys"
    keyfile.write_text(new_key_entry("k2") + "\n" + new_key_entry("k1") + "\n")
    cfg = payloads_config_from_env(
        {
            "EPISODES_PAYLOADS_STORAGE": "s3",
            "EPISODES_S3_BUCKET": "my-bucket",
            "EPISODES_S3_PREFIX": "prod/payloads",
            "EPISODES_S3_ENDPOINT_URL": "http://127.0.0.1:9000",
            "EPISODES_PAYLOAD_KEYS_FILE": str(keyfile),
        }
    )
    assert cfg.storage == S3Storage(
        bucket="my-bucket", prefix="prod/payloads", endpoint_url="http://127.0.0.1:9000"
    )
    assert isinstance(cfg.encryption, AesGcmEncryption)
    assert [k for k, _ in cfg.encryption.load_keys()] == ["k2", "k1"]


@pytest.mark.parametrize(
    ("env", "var"),
    [
        ({"EPISODES_PAYLOADS_STORAGE": "disk"}, "EPISODES_PAYLOADS_STORAGE"),
        ({"EPISODES_PAYLOADS_STORAGE": "local"}, "EPISODES_PAYLOADS_PATH"),
        ({"EPISODES_PAYLOADS_STORAGE": "s3"}, "EPISODES_S3_BUCKET"),
        ({"EPISODES_PAYLOADS_STORAGE": "s3", "EPISODES_S3_BUCKET": "b"}, "EPISODES_S3_BUCKET"),
        (
            {
                "EPISODES_PAYLOADS_STORAGE": "s3",
                "EPISODES_S3_BUCKET": "bucket",
                "EPISODES_S3_ENDPOINT_URL": "localhost:9000",
            },
            "EPISODES_S3_ENDPOINT_URL",
        ),
        (
            {
                "EPISODES_PAYLOADS_STORAGE": "s3",
                "EPISODES_S3_BUCKET": "bucket",
                "EPISODES_S3_PREFIX": "/abs",
            },
            "EPISODES_S3_PREFIX",
        ),
        ({"EPISODES_PAYLOADS_THRESHOLD_BYTES": "lots"}, "EPISODES_PAYLOADS_THRESHOLD_BYTES"),
        ({"EPISODES_PAYLOADS_THRESHOLD_BYTES": "9999999"}, "EPISODES_PAYLOADS_THRESHOLD_BYTES"),
        ({"EPISODES_PAYLOAD_KEYS": "nope"}, "EPISODES_PAYLOAD_KEYS"),
        (
            {"EPISODES_PAYLOAD_KEYS": f"a:{KEY}", "EPISODES_PAYLOAD_KEYS_FILE": "/k"},
            "EPISODES_PAYLOAD_KEYS_FILE",
        ),
        ({"EPISODES_PAYLOAD_KEYS_FILE": "/nonexistent/keys"}, "EPISODES_PAYLOAD_KEYS_FILE"),
    ],
)
def test_env_errors_name_the_variable(env: dict[str, str], var: str) -> None:
    with pytest.raises(PayloadsConfigError) as e:
        payloads_config_from_env(env)
    msg = str(e.value)
    assert msg.startswith(f"{var}: "), msg
    assert "\n" not in msg and KEY not in msg


def test_keys_env_read_at_use_and_missing_is_named() -> None:
    enc = AesGcmEncryption(keys_env="SOME_KEYS")
    with pytest.raises(PayloadsConfigError, match=r"^SOME_KEYS: no payload keys set"):
        enc.load_keys({})
    assert enc.load_keys({"SOME_KEYS": f"a:{KEY}"}) == [("a", b"k" * 32)]
