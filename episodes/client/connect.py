"""Connecting to Temporal with the project's data converter, with one clear error.

The converter is pydantic JSON plus, when configured, encryption and external storage
(`episodes.payloads.settings`: EPISODES_PAYLOADS_* today). Pass `data_converter=` to
override it (the embedded stack's local storage, a test's own keys).
"""

from __future__ import annotations

import asyncio
import time

from temporalio.client import Client
from temporalio.converter import DataConverter

from episodes.errors import EpisodesError


class ServerUnreachable(EpisodesError):
    pass


async def connect(
    address: str = "127.0.0.1:7233",
    *,
    namespace: str = "default",
    timeout_s: float = 10.0,
    data_converter: DataConverter | None = None,
) -> Client:
    """Connect and wait until the namespace answers (a fresh dev server needs a moment).

    `data_converter` None: the configured one (`configured_data_converter()`); a bad
    payload setting is a one-line `PayloadsConfigError` naming the variable.
    """
    if data_converter is None:
        from episodes.payloads.settings import configured_data_converter

        data_converter = configured_data_converter()
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while True:
        try:
            client = await Client.connect(
                address, namespace=namespace, data_converter=data_converter
            )
            await client.count_workflows()  # proves the namespace and visibility are up
            return client
        except Exception as e:  # RuntimeError from the bridge, RPCError from the call
            last = e
        if time.monotonic() >= deadline:
            first = str(last).splitlines()[0] if last and str(last) else type(last).__name__
            raise ServerUnreachable(
                f"cannot reach Temporal at {address} (namespace {namespace!r}): {first}"
            )
        await asyncio.sleep(0.25)
