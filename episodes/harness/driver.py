"""What a live session needs from the program it drives, whatever protocol it speaks.

`NativeDriver` (the native framed protocol) implements it; so does the ACP driver.
A driver never raises out of `turn()` for a misbehaving harness: crashes, timeouts and
protocol violations come back as a TurnRecord with `error_type`, after the driver has
stopped the process itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from episodes.harness.process import EventCallback
from episodes.types.results import TurnRecord

if TYPE_CHECKING:
    from episodes.harness.budget import StreamBudget
    from episodes.runtimes.base import Runtime
    from episodes.types.spec import EpisodeSpec


class HarnessDriver(Protocol):
    @property
    def alive(self) -> bool: ...

    @property
    def pid(self) -> int | None: ...

    @property
    def stderr_tail(self) -> str: ...

    async def start(self) -> None:
        """Open the process and wait until it is ready. Raises HarnessStartFailed."""

    async def turn(
        self, n: int, message: Any, *, timeout_s: float, on_event: EventCallback | None = None
    ) -> TurnRecord:
        """Run turn `n` with `message`; failures are in the record, not raised."""

    async def stop(self) -> None:
        """Stop the program and everything it started. Idempotent."""


def make_driver(
    spec: EpisodeSpec,
    runtime: Runtime,
    argv: list[str],
    env: dict[str, str],
    *,
    mcp_url: str | None = None,
    mcp_token: str | None = None,
    budget: StreamBudget | None = None,
) -> HarnessDriver:
    """The driver for `spec.harness.protocol`, not yet started."""
    h = spec.harness
    if h.protocol == "acp":
        # Imported here: the ACP SDK is needed only by episodes that run ACP agents.
        from episodes.harness.acp import AcpDriver, http_mcp_server

        servers = [http_mcp_server("episodes", mcp_url, mcp_token)] if mcp_url else []
        return AcpDriver(
            runtime,
            argv,
            env=env,
            cwd=h.cwd,
            ready_timeout_s=h.ready_timeout_s,
            stop_timeout_s=h.stop_timeout_s,
            mcp_servers=list(servers),
            permissions=h.permissions,
            max_message_bytes=h.max_packet_bytes,
            budget=budget,
        )
    from episodes.harness.native import NativeDriver

    return NativeDriver(
        runtime,
        argv,
        env=env,
        cwd=h.cwd,
        ready_timeout_s=h.ready_timeout_s,
        stop_timeout_s=h.stop_timeout_s,
        max_packet_bytes=h.max_packet_bytes,
        budget=budget,
    )
