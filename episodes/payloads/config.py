"""Where large payloads go and how payloads are encrypted: config models and the env loader.

Secrets never live in this config: AWS credentials come from the standard AWS
environment (boto's chain), and encryption keys from a named environment variable
or a key file. Every error is one line that names the field, variable or file,
and never shows a key.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from episodes.errors import PayloadsConfigError

# The SDK's own default: payloads at or above this size leave the history. Well under
# Temporal's 2 MB per-payload limit, and small enough that a long transcript of model
# calls stays far from the 50 MB history limit.
DEFAULT_THRESHOLD_BYTES = 256 * 1024
# A payload kept inline must stay under the server's 2 MB limit (with room for the
# encryption overhead and the event around it).
MAX_THRESHOLD_BYTES = 2_000_000 - 64 * 1024

DEFAULT_KEYS_ENV = "EPISODES_PAYLOAD_KEYS"

_KEY_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_AES_KEY_SIZES = (16, 24, 32)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Threshold = Annotated[int, Field(ge=0, le=MAX_THRESHOLD_BYTES)]


class NoStorage(_Model):
    """Every payload stays inline in the history (Temporal's limits apply)."""

    type: Literal["none"] = "none"


class LocalStorage(_Model):
    """Content-addressed files under one directory: for `episodes dev` and single hosts."""

    type: Literal["local"] = "local"
    path: Path
    threshold_bytes: Threshold = DEFAULT_THRESHOLD_BYTES


class S3Storage(_Model):
    """An S3 bucket (or any S3-compatible server via `endpoint_url`)."""

    type: Literal["s3"] = "s3"
    bucket: Annotated[str, Field(min_length=3, max_length=255)]
    prefix: str = ""
    endpoint_url: str | None = None
    region: str | None = None
    threshold_bytes: Threshold = DEFAULT_THRESHOLD_BYTES

    @model_validator(mode="after")
    def _prefix_is_a_key_prefix(self) -> S3Storage:
        if self.prefix.startswith("/"):
            raise ValueError("prefix must not start with '/' (S3 keys are relative)")
        return self


StorageConfig = Annotated[NoStorage | LocalStorage | S3Storage, Field(discriminator="type")]


class NoEncryption(_Model):
    type: Literal["none"] = "none"


class AesGcmEncryption(_Model):
    """AES-GCM with named keys: the first key encrypts, every key decrypts (rotation)."""

    type: Literal["aes-gcm"] = "aes-gcm"
    keys_env: str | None = None
    keys_file: Path | None = None

    @model_validator(mode="after")
    def _one_key_source(self) -> AesGcmEncryption:
        if (self.keys_env is None) == (self.keys_file is None):
            raise ValueError("set exactly one of keys_env and keys_file")
        return self

    def load_keys(self, environ: Mapping[str, str] | None = None) -> list[tuple[str, bytes]]:
        """The configured keys, active first. Read at call time so keys never sit in config."""
        env = os.environ if environ is None else environ
        if self.keys_env is not None:
            text = env.get(self.keys_env, "")
            if not text.strip():
                raise PayloadsConfigError(
                    f"{self.keys_env}: no payload keys set (expected id:base64key entries)"
                )
            return parse_keys(text, source=self.keys_env)
        assert self.keys_file is not None
        try:
            text = self.keys_file.read_text()
        except OSError as e:
            raise PayloadsConfigError(
                f"{self.keys_file}: cannot read payload keys: {e.strerror}"
            ) from None
        return parse_keys(text, source=str(self.keys_file))


EncryptionConfig = Annotated[NoEncryption | AesGcmEncryption, Field(discriminator="type")]


class PayloadsConfig(_Model):
    storage: StorageConfig = Field(default_factory=NoStorage)
    encryption: EncryptionConfig = Field(default_factory=NoEncryption)

    @classmethod
    def parse(cls, data: object, *, source: str = "payloads") -> PayloadsConfig:
        """Validate a mapping (from YAML/JSON) with a one-line error naming the field."""
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "(root)"
            # The message, never the input: a misplaced key must not be echoed back.
            raise PayloadsConfigError(f"{source}: {where}: {err['msg']}") from None


def parse_keys(text: str, *, source: str) -> list[tuple[str, bytes]]:
    """Parse `id:base64key` entries separated by commas or newlines; `#` starts a comment line.

    Errors name the source and the entry's position (and its id when that parsed),
    never the key material.
    """
    entries = [
        e.strip()
        for line in text.splitlines()
        if not line.strip().startswith("#")
        for e in line.split(",")
        if e.strip()
    ]
    if not entries:
        raise PayloadsConfigError(f"{source}: no payload keys (expected id:base64key entries)")
    keys: list[tuple[str, bytes]] = []
    seen: set[str] = set()
    for n, entry in enumerate(entries, 1):
        key_id, sep, b64 = entry.partition(":")
        key_id = key_id.strip()
        if not sep or not _KEY_ID.match(key_id):
            raise PayloadsConfigError(
                f"{source}: entry {n} is not id:base64key (ids are 1-64 of A-Z a-z 0-9 . _ -)"
            )
        if key_id in seen:
            raise PayloadsConfigError(f"{source}: key id {key_id!r} appears twice")
        seen.add(key_id)
        try:
            key = base64.b64decode(b64.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise PayloadsConfigError(f"{source}: key {key_id!r} is not valid base64") from None
        if len(key) not in _AES_KEY_SIZES:
            raise PayloadsConfigError(
                f"{source}: key {key_id!r} is {len(key)} bytes; AES needs 16, 24 or 32"
            )
        keys.append((key_id, key))
    return keys


def _threshold(env: Mapping[str, str], var: str) -> int:
    raw = env.get(var, "").strip()
    if not raw:
        return DEFAULT_THRESHOLD_BYTES
    try:
        value = int(raw)
    except ValueError:
        raise PayloadsConfigError(f"{var}: {raw!r} is not a whole number of bytes") from None
    if not 0 <= value <= MAX_THRESHOLD_BYTES:
        raise PayloadsConfigError(f"{var}: {value} is not between 0 and {MAX_THRESHOLD_BYTES}")
    return value


def payloads_config_from_env(
    environ: Mapping[str, str] | None = None,
    *,
    default_storage: NoStorage | LocalStorage | S3Storage | None = None,
) -> PayloadsConfig:
    """Build the config from EPISODES_* variables.

    EPISODES_PAYLOADS_STORAGE     none | local | s3 (unset: `default_storage`, else none)
    EPISODES_PAYLOADS_PATH        local: the directory (required for local)
    EPISODES_PAYLOADS_THRESHOLD_BYTES  payloads at or above this size leave the history
    EPISODES_S3_BUCKET / EPISODES_S3_PREFIX / EPISODES_S3_ENDPOINT_URL / EPISODES_S3_REGION
    EPISODES_PAYLOAD_KEYS         id:base64key entries, first one active (turns on aes-gcm)
    EPISODES_PAYLOAD_KEYS_FILE    a file of the same entries (instead of the variable)
    """
    env = os.environ if environ is None else environ
    threshold = _threshold(env, "EPISODES_PAYLOADS_THRESHOLD_BYTES")
    kind = env.get("EPISODES_PAYLOADS_STORAGE", "").strip().lower()
    storage: NoStorage | LocalStorage | S3Storage
    if not kind:
        storage = default_storage or NoStorage()
    elif kind == "none":
        storage = NoStorage()
    elif kind == "local":
        path = env.get("EPISODES_PAYLOADS_PATH", "").strip()
        if not path:
            raise PayloadsConfigError(
                "EPISODES_PAYLOADS_PATH: required when EPISODES_PAYLOADS_STORAGE=local"
            )
        storage = LocalStorage(path=Path(path).expanduser(), threshold_bytes=threshold)
    elif kind == "s3":
        bucket = env.get("EPISODES_S3_BUCKET", "").strip()
        if not bucket:
            raise PayloadsConfigError(
                "EPISODES_S3_BUCKET: required when EPISODES_PAYLOADS_STORAGE=s3"
            )
        endpoint = env.get("EPISODES_S3_ENDPOINT_URL", "").strip() or None
        if endpoint is not None and not re.match(r"^https?://[^/\s]+", endpoint):
            raise PayloadsConfigError(
                f"EPISODES_S3_ENDPOINT_URL: {endpoint!r} is not an http(s):// URL"
            )
        prefix = env.get("EPISODES_S3_PREFIX", "").strip()
        if prefix.startswith("/"):
            raise PayloadsConfigError("EPISODES_S3_PREFIX: must not start with '/'")
        try:
            storage = S3Storage(
                bucket=bucket,
                prefix=prefix,
                endpoint_url=endpoint,
                region=env.get("EPISODES_S3_REGION", "").strip() or None,
                threshold_bytes=threshold,
            )
        except ValidationError as e:
            raise PayloadsConfigError(f"EPISODES_S3_BUCKET: {e.errors()[0]['msg']}") from None
    else:
        raise PayloadsConfigError(
            f"EPISODES_PAYLOADS_STORAGE: {kind!r} is not one of none, local, s3"
        )

    keys_inline = env.get("EPISODES_PAYLOAD_KEYS", "").strip()
    keys_file = env.get("EPISODES_PAYLOAD_KEYS_FILE", "").strip()
    encryption: NoEncryption | AesGcmEncryption
    if keys_inline and keys_file:
        raise PayloadsConfigError(
            "EPISODES_PAYLOAD_KEYS_FILE: set only one of it and EPISODES_PAYLOAD_KEYS"
        )
    if keys_inline:
        encryption = AesGcmEncryption(keys_env="EPISODES_PAYLOAD_KEYS")
        parse_keys(keys_inline, source="EPISODES_PAYLOAD_KEYS")  # fail now, not mid-episode
    elif keys_file:
        encryption = AesGcmEncryption(keys_file=Path(keys_file).expanduser())
        try:
            encryption.load_keys(env)
        except PayloadsConfigError as e:
            raise PayloadsConfigError(f"EPISODES_PAYLOAD_KEYS_FILE: {e}") from None
    else:
        encryption = NoEncryption()
    return PayloadsConfig(storage=storage, encryption=encryption)
