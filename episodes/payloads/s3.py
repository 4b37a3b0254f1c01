"""The SDK's S3 storage driver, configured from `S3Storage`, with a key prefix and a lazy client.

Why a lazy client: `data_converter(config)` is synchronous (it is handed to
`Client.connect` and `Worker`), but an aioboto3 client is an async context opened
inside a running event loop. So the client opens on first use, in the loop that
uses it, and `aclose()` closes it.

Why the prefix lives in the claim: the SDK driver writes keys `v0/ns/.../d/sha256/..`
and has no prefix option. We prefix the key on write and record the full key in the
claim, so a history stays readable after the prefix setting changes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.contrib.aws.s3driver import S3StorageDriver, S3StorageDriverClient
from temporalio.converter import StorageDriverClaim, StorageDriverStoreContext

from episodes.errors import PayloadsConfigError
from episodes.payloads.config import S3Storage

DRIVER_NAME = "aws.s3driver"  # the SDK's default name: other SDKs' workers can read our claims


class LazyAioboto3Client(S3StorageDriverClient):
    """An aioboto3 S3 client opened on first use in the current loop; credentials from AWS env."""

    def __init__(
        self, *, endpoint_url: str | None = None, region: str | None = None, prefix: str = ""
    ):
        try:
            import aioboto3  # noqa: F401
            from temporalio.contrib.aws.s3driver.aioboto3 import new_aioboto3_client  # noqa: F401
        except ImportError:
            raise PayloadsConfigError(
                "storage.type s3 needs aioboto3: pip install 'episodes[s3]'"
            ) from None
        self.endpoint_url = endpoint_url
        self.region = region
        self.prefix = prefix
        self._inner: S3StorageDriverClient | None = None
        self._context: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock: asyncio.Lock | None = None

    async def _client(self) -> S3StorageDriverClient:
        loop = asyncio.get_running_loop()
        if self._inner is not None and self._loop is loop:
            return self._inner
        if self._lock is None or self._loop is not loop:
            # A client (and its connection pool) belongs to one loop: a converter used
            # from a new loop gets a new client instead of a hang on the old loop's sockets.
            self._lock, self._loop, self._inner = asyncio.Lock(), loop, None
        async with self._lock:
            if self._inner is None:
                import aioboto3
                from temporalio.contrib.aws.s3driver.aioboto3 import new_aioboto3_client

                ctx = aioboto3.Session().client(
                    "s3", endpoint_url=self.endpoint_url, region_name=self.region
                )
                raw = await ctx.__aenter__()
                self._context, self._inner = ctx, new_aioboto3_client(raw)
            return self._inner

    async def put_object(self, *, bucket: str, key: str, data: bytes) -> None:
        await (await self._client()).put_object(bucket=bucket, key=self.prefix + key, data=data)

    async def object_exists(self, *, bucket: str, key: str) -> bool:
        return await (await self._client()).object_exists(bucket=bucket, key=self.prefix + key)

    async def get_object(self, *, bucket: str, key: str) -> bytes:
        # Claims already hold the full (prefixed) key; see PrefixedS3StorageDriver.
        return await (await self._client()).get_object(bucket=bucket, key=key)

    def describe(self) -> Mapping[str, str]:
        info = {"endpoint_url": self.endpoint_url or "aws", "prefix": self.prefix or "(none)"}
        if self._inner is not None:
            info.update(self._inner.describe())
        return info

    async def aclose(self) -> None:
        ctx, self._context, self._inner = self._context, None, None
        if ctx is not None:
            with contextlib.suppress(Exception):
                await ctx.__aexit__(None, None, None)


class PrefixedS3StorageDriver(S3StorageDriver):
    """The SDK driver, whose claims carry the prefixed key the client actually wrote."""

    def __init__(self, client: LazyAioboto3Client, bucket: str, **kwargs: Any):
        super().__init__(client=client, bucket=bucket, **kwargs)
        self.lazy_client = client

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        claims = await super().store(context, payloads)
        prefix = self.lazy_client.prefix
        if not prefix:
            return claims
        return [
            StorageDriverClaim(claim_data={**c.claim_data, "key": prefix + c.claim_data["key"]})
            for c in claims
        ]

    async def aclose(self) -> None:
        await self.lazy_client.aclose()


def s3_driver(config: S3Storage) -> PrefixedS3StorageDriver:
    prefix = config.prefix
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    client = LazyAioboto3Client(
        endpoint_url=config.endpoint_url, region=config.region, prefix=prefix
    )
    return PrefixedS3StorageDriver(client, config.bucket, driver_name=DRIVER_NAME)
