"""Connecting to Temporal with the project's data converter, with one clear error.

`connect(address)` is the plain form (a dev server, tests). `connect_config(config)`
connects with a resolved `episodes.client.config.Config`: the SDK's envconfig profile
(address, namespace, API key, TLS / mTLS), so Temporal Cloud works by setting those
alone. Both take further `Client.connect` keyword arguments (`runtime=`, ...), passed
through. The data converter is pydantic JSON plus, when configured, encryption and
external storage (`episodes.payloads.settings`: EPISODES_PAYLOADS_* today); pass
`data_converter=` to override it (the embedded stack's local storage, a test's keys).
"""

from __future__ import annotations

import asyncio
import atexit
import gc
import time
import weakref
from typing import TYPE_CHECKING, Any

from temporalio.client import Client

from episodes.errors import ServerUnreachable

if TYPE_CHECKING:
    from episodes.client.config import Config


async def connect(
    address: str = "127.0.0.1:7233",
    *,
    namespace: str = "default",
    timeout_s: float = 10.0,
    **client_options: Any,
) -> Client:
    """Connect and wait until the namespace answers (a fresh dev server needs a moment).

    `client_options` go to `Client.connect` (api_key, tls, rpc_metadata, runtime,
    data_converter, ...). Without `data_converter`: the configured one
    (`configured_data_converter()`); a bad payload setting is a one-line
    `PayloadsConfigError` naming the variable.
    """
    # Traces, when OTEL_* asks for them: the SDK's interceptor on this client and on
    # every worker built on it (episodes.traces).
    from episodes.traces import start_tracing
    from episodes.traces.interceptor import client_interceptors

    if start_tracing("episodes"):
        client_options["interceptors"] = [
            *client_interceptors(),
            *client_options.get("interceptors", ()),
        ]
    if client_options.get("data_converter") is None:
        from episodes.payloads.settings import configured_data_converter

        client_options["data_converter"] = configured_data_converter()
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while True:
        try:
            client = await Client.connect(address, namespace=namespace, **client_options)
            await client.count_workflows()  # proves the namespace and visibility are up
            close_at_exit(client)
            return client
        except Exception as e:  # RuntimeError from the bridge, RPCError from the call
            last = e
        if time.monotonic() >= deadline:
            first = str(last).splitlines()[0] if last and str(last) else type(last).__name__
            raise ServerUnreachable(
                f"cannot reach Temporal at {address} (namespace {namespace!r}): {first}"
            )
        await asyncio.sleep(0.25)


async def connect_config(
    config: Config, *, timeout_s: float = 10.0, **client_options: Any
) -> Client:
    """Connect with a resolved configuration (its envconfig profile); flags already applied."""
    kwargs: dict[str, Any] = dict(config.connect_config())
    address = kwargs.pop("target_host")
    namespace = kwargs.pop("namespace")
    kwargs.update(client_options)
    return await connect(address, namespace=namespace, timeout_s=timeout_s, **kwargs)


# -- leaving the process ------------------------------------------------------------
# The SDK's native client (its Rust connection, `ServiceClient._bridge_client`) must
# not be dropped while CPython finalizes: its teardown takes the GIL from a runtime
# thread, and during finalization that aborts the process ("PyGILState_Release: thread
# state must be current", exit code 134) or crashes it (139), after all the work is
# done (temporalio/sdk-python#300). A client left in a reference cycle (every client
# is) or in a module global is dropped exactly then. Measured with a script that lists
# workflows and returns from `asyncio.run`: 9 of 30 runs crashed; dropped at exit, as
# below, 0 of 30, and 0 of 200 in tests/episodes/client/test_exit.py.
_OPEN: weakref.WeakSet[Client] = weakref.WeakSet()
_AT_EXIT: list[bool] = []  # the exit hook is registered (once)


def close_at_exit(client: Client) -> None:
    """Drop `client`'s native connection when the interpreter exits, before it
    finalizes: a script that connects and returns from `asyncio.run(main())` exits 0
    every time, with no call of its own."""
    if not _AT_EXIT:
        atexit.register(_drop_native_clients)
        _AT_EXIT.append(True)
    _OPEN.add(client)


def _drop_native_clients() -> None:
    """At exit, while the interpreter is whole: each client's native connection goes,
    then the garbage that held one is collected."""
    for client in list(_OPEN):
        service = client.service_client
        if hasattr(service, "_bridge_client"):
            service._bridge_client = None
    _OPEN.clear()
    gc.collect()
