"""The project's DataConverter: pydantic conversion, then encryption, then external storage.

Order (temporalio 1.35, `DataConverter.encode` / `_transform_outbound_payloads`):

    value -> payload_converter (pydantic JSON) -> payload_codec.encode (AES-GCM)
          -> external_storage (payloads >= threshold go to the driver, the history
             keeps a small `ExternalStorageReference` payload)

and the reverse on decode (retrieve, then codec decode). So the driver only ever
sees ciphertext: the local directory or S3 bucket holds encrypted blobs, and the
threshold applies to the encrypted size. The reference payload itself (driver
name, bucket/key or digest, size) stays plaintext in the history: the SDK does not
run references through the codec yet (`_ENCODE_STORAGE_REFERENCES` is off), and
the references hold no content. Tests assert this order (tests/episodes/payloads).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import (
    DataConverter,
    DefaultFailureConverterWithEncodedAttributes,
    ExternalStorage,
    StorageDriver,
)

from episodes.payloads.codec import AesGcmCodec
from episodes.payloads.config import (
    AesGcmEncryption,
    LocalStorage,
    NoStorage,
    PayloadsConfig,
    S3Storage,
)
from episodes.payloads.local import LocalDirectoryDriver


def storage_driver(config: PayloadsConfig) -> StorageDriver | None:
    storage = config.storage
    if isinstance(storage, LocalStorage):
        return LocalDirectoryDriver(storage.path)
    if isinstance(storage, S3Storage):
        from episodes.payloads.s3 import s3_driver  # aioboto3 is an optional extra

        return s3_driver(storage)
    assert isinstance(storage, NoStorage)
    return None


def payload_codec(
    config: PayloadsConfig, environ: Mapping[str, str] | None = None
) -> AesGcmCodec | None:
    if isinstance(config.encryption, AesGcmEncryption):
        return AesGcmCodec(config.encryption.load_keys(environ))
    return None


def data_converter(
    config: PayloadsConfig | None = None, *, environ: Mapping[str, str] | None = None
) -> DataConverter:
    """The converter for clients, workers and replayers; all of them must use the same config.

    With no storage and no encryption this is exactly `pydantic_data_converter`, the
    converter `episodes.client.connect` uses today, so histories written before stay readable.
    Keys are read now (from the environment or the key file), so a bad key fails here.
    """
    config = config or PayloadsConfig()
    codec = payload_codec(config, environ)
    driver = storage_driver(config)
    if codec is None and driver is None:
        return pydantic_data_converter
    external = None
    if driver is not None:
        # A driver is made only from a storage that has a threshold.
        assert not isinstance(config.storage, NoStorage)
        threshold = config.storage.threshold_bytes
        external = ExternalStorage(drivers=[driver], payload_size_threshold=threshold)
    failures = pydantic_data_converter.failure_converter_class
    if codec is not None:
        # Failure messages and stack traces (a harness's stderr tail, an env's error)
        # are plaintext in the history by default; with encryption on they move into
        # an encoded payload too. The UI shows them through the codec server.
        failures = DefaultFailureConverterWithEncodedAttributes
    return dataclasses.replace(
        pydantic_data_converter,
        payload_codec=codec,
        external_storage=external,
        failure_converter_class=failures,
    )


async def aclose(converter: DataConverter) -> None:
    """Close what the converter's drivers opened (the S3 client); safe on any converter."""
    storage = converter.external_storage
    for driver in storage.drivers if storage else ():
        close = getattr(driver, "aclose", None)
        if close is not None:
            await close()
