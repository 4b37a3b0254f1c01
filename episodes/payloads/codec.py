"""AES-GCM payload encryption with named keys, so keys rotate without breaking old histories.

An encrypted payload is a new Payload whose metadata says `binary/encrypted` and
names the key id; its data is the 12-byte nonce followed by the AES-GCM ciphertext
of the whole original Payload (metadata included, so the encoding of the content is
hidden too). The key id is also the associated data, so a payload relabelled with
another key id fails authentication instead of decrypting under the wrong key.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

from episodes.errors import PayloadDecryptError, PayloadKeyError

ENCODING = b"binary/encrypted"
KEY_ID_KEY = "encryption-key-id"
CIPHER_KEY = "encryption-cipher"
CIPHER = b"AES-GCM"
_NONCE_BYTES = 12
_AAD_PREFIX = b"episodes.payloads/aes-gcm/v1:"


class AesGcmCodec(PayloadCodec):
    """Encrypts every payload with the first key; decrypts with whichever key a payload names."""

    def __init__(self, keys: Sequence[tuple[str, bytes]]):
        if not keys:
            raise PayloadKeyError("AesGcmCodec needs at least one key")
        self._ciphers: dict[str, AESGCM] = {}
        for key_id, key in keys:
            if key_id in self._ciphers:
                raise PayloadKeyError(f"payload key id {key_id!r} appears twice")
            if len(key) not in (16, 24, 32):
                # The size only, never the key.
                raise PayloadKeyError(f"payload key {key_id!r} is {len(key)} bytes, not 16/24/32")
            self._ciphers[key_id] = AESGCM(key)
        self.active_key_id = keys[0][0]

    @property
    def key_ids(self) -> list[str]:
        return list(self._ciphers)

    def encrypt(self, payload: Payload) -> Payload:
        key_id = self.active_key_id
        nonce = os.urandom(_NONCE_BYTES)  # random 96-bit nonces: safe far beyond our volumes
        sealed = self._ciphers[key_id].encrypt(
            nonce, payload.SerializeToString(), _AAD_PREFIX + key_id.encode()
        )
        return Payload(
            metadata={
                "encoding": ENCODING,
                KEY_ID_KEY: key_id.encode(),
                CIPHER_KEY: CIPHER,
            },
            data=nonce + sealed,
        )

    def decrypt(self, payload: Payload) -> Payload:
        """The original payload; a payload that is not ours passes through unchanged."""
        if payload.metadata.get("encoding") != ENCODING:
            return payload
        key_id = payload.metadata.get(KEY_ID_KEY, b"").decode(errors="replace")
        cipher = payload.metadata.get(CIPHER_KEY, CIPHER)
        if cipher != CIPHER:
            raise PayloadDecryptError(
                f"payload uses cipher {cipher.decode(errors='replace')!r}, not AES-GCM"
            )
        aes = self._ciphers.get(key_id)
        if aes is None:
            raise PayloadKeyError(
                f"payload was encrypted with key id {key_id!r}, which is not configured "
                f"(configured: {', '.join(self._ciphers)}); add that key to the key list"
            )
        data = payload.data
        try:
            plain = aes.decrypt(
                data[:_NONCE_BYTES], data[_NONCE_BYTES:], _AAD_PREFIX + key_id.encode()
            )
        except InvalidTag:
            raise PayloadDecryptError(
                f"payload under key id {key_id!r} failed authentication: "
                "a different key has that id, or the payload is corrupt"
            ) from None
        original = Payload()
        original.ParseFromString(plain)
        return original

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.encrypt(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.decrypt(p) for p in payloads]


def new_key_entry(key_id: str) -> str:
    """A fresh `id:base64key` entry (AES-256) for EPISODES_PAYLOAD_KEYS or a key file."""
    return f"{key_id}:{base64.b64encode(AESGCM.generate_key(bit_length=256)).decode()}"
