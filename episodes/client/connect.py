"""Connecting to Temporal with the pydantic data converter, with one clear error."""

from __future__ import annotations

import asyncio
import time

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from episodes.errors import EpisodesError


class ServerUnreachable(EpisodesError):
    pass


async def connect(
    address: str = "127.0.0.1:7233", *, namespace: str = "default", timeout_s: float = 10.0
) -> Client:
    """Connect and wait until the namespace answers (a fresh dev server needs a moment)."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while True:
        try:
            client = await Client.connect(
                address, namespace=namespace, data_converter=pydantic_data_converter
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
