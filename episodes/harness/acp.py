"""Any Agent Client Protocol (ACP) agent as a harness: one live agent process per episode.

`AcpDriver` has the interface and failure semantics of `NativeDriver`, but
speaks ACP (JSON-RPC 2.0, one JSON object per line) on the process's stdio, through
the `agent-client-protocol` SDK's client side:

- `start()`: `initialize`, then `session/new` (cwd, the MCP servers given here), both
  within `ready_timeout_s`; any failure is `HarnessStartFailed`.
- `turn(n, message)`: one `session/prompt`. A str message is one text block; a dict
  `{"prompt": [blocks]}` is sent as those ACP content blocks; anything else is sent
  as its JSON text. Every `session/update` becomes an event (the update as ACP JSON,
  e.g. `{"sessionUpdate": "agent_message_chunk", "content": {...}}`), and so does each
  permission decision (`{"requestPermission": {"toolCall", "options", "outcome"}}`).
  Updates that arrive between turns (e.g. `available_commands_update` after
  `session/new`) go into the next turn's events. The reply is
  `{"text": <the agent_message_chunk texts joined>, "stop_reason": <stopReason>}`.
- Turn timeout: `session/cancel`, a short grace for the agent to wind down, then the
  process is stopped and the record says `turn_timeout`.
- `session/request_permission` is answered by `permissions` (see `AcpPermissions`).
- `fs/*` and `terminal/*` are refused (method not found), and the capabilities sent
  in `initialize` say so: the files and shells are in the runtime's box, which is not
  where this driver runs (a Docker/Modal/Prime box is another machine), so serving
  them from here would act on the wrong filesystem. Agents use their own tools.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import Awaitable
from typing import Any, Unpack

import pydantic
from acp import PROTOCOL_VERSION, RequestError
from acp.client.connection import ClientSideConnection
from acp.schema import ClientCapabilities, FileSystemCapabilities, Implementation

from episodes.errors import HarnessReportedError, ProtocolError
from episodes.harness.acp_client import (
    MCP_SERVER,
    PERMISSIONS,
    AcpAllowList,
    AcpPermissions,
    EpisodeClient,
    McpServer,
    Unsupported,
    as_json,
    http_mcp_server,
    prompt_blocks,
    rpc_error,
    unsupported_mcp,
)
from episodes.harness.acp_transport import RuntimeTransport
from episodes.harness.process import (
    EXIT_DRAIN_S,
    EventCallback,
    Exited,
    ProcessDriver,
    ProcessOptions,
)
from episodes.runtimes.base import Runtime, RuntimeProcess

__all__ = [
    "AcpAllowList",
    "AcpDriver",
    "AcpPermissions",
    "http_mcp_server",
    "prompt_blocks",
]

_CANCEL_SEND_S = 1.0


class AcpDriver(ProcessDriver):
    name = "AcpDriver"
    noun = "agent"
    stopped_early = "agent was stopped before its session started"
    # No farewell: ACP has no shutdown request, end of stdin is the agent's signal to exit.

    def __init__(
        self,
        runtime: Runtime,
        argv: list[str],
        *,
        mcp_servers: list[McpServer | dict[str, Any]] | None = None,
        permissions: AcpPermissions | dict[str, Any] = "deny",
        session_cwd: str | None = None,
        cancel_grace_s: float = 2.0,
        max_message_bytes: int = 16 * 1024 * 1024,
        **options: Unpack[ProcessOptions],
    ) -> None:
        super().__init__(runtime, argv, **options)
        self.mcp_servers = [MCP_SERVER.validate_python(m) for m in mcp_servers or []]
        self._client = EpisodeClient(PERMISSIONS.validate_python(permissions))
        self.session_cwd = session_cwd
        self.cancel_grace_s = cancel_grace_s
        self.max_message_bytes = max_message_bytes
        self._transport: RuntimeTransport | None = None
        self._fault_task: asyncio.Task[Any] | None = None
        self._conn: ClientSideConnection | None = None
        self.session_id: str | None = None
        self.agent_info: dict[str, Any] | None = None  # the agent's `initialize` answer
        self._step = "initialize"  # the handshake's request under way, for its failure
        self._call: asyncio.Future[Any] | None = None  # the turn's `session/prompt`

    @property
    def permissions(self) -> AcpPermissions:
        return self._client.permissions

    # -- start ---------------------------------------------------------------------------

    async def _handshake(self, deadline: float) -> None:
        """`initialize`, then `session/new`."""
        assert self._conn is not None
        self._step = "initialize"
        init = await self._answer(self._initialize(), deadline)
        self.agent_info = as_json(init)
        unsupported_mcp(init, self.mcp_servers)
        self._step = "session/new"
        new = await self._answer(
            self._conn.new_session(
                cwd=self._session_cwd(),
                # A copy: the SDK takes a list of a wider union, and lists are invariant.
                mcp_servers=list(self.mcp_servers),
            ),
            deadline,
        )
        self.session_id = new.session_id

    def _attach(self, proc: RuntimeProcess) -> None:
        self._transport = RuntimeTransport(proc, self.max_message_bytes, self.budget)
        self._fault_task = asyncio.ensure_future(self._transport.faulted.wait())
        self._conn = ClientSideConnection(self._client, self._transport)

    def _not_ready(self, e: BaseException) -> str | None:
        if isinstance(e, TimeoutError):
            return f"agent answered no {self._step!r} within {self.ready_timeout_s:g} s"
        if isinstance(e, Exited):
            return f"agent {e} before it answered {self._step!r}"
        if isinstance(e, ProtocolError):
            return f"protocol error before the session started: {e.detail}"
        if isinstance(e, RequestError):
            return f"agent refused {self._step!r}: {rpc_error(e)}"
        if isinstance(e, Unsupported):
            return str(e)
        return None

    def _initialize(self) -> Awaitable[Any]:
        assert self._conn is not None
        no_fs = FileSystemCapabilities(read_text_file=False, write_text_file=False)
        return self._conn.initialize(
            protocol_version=PROTOCOL_VERSION,
            client_capabilities=ClientCapabilities(fs=no_fs, terminal=False),
            client_info=Implementation(name="episodes", version="0.1.0"),
        )

    def _session_cwd(self) -> str:
        # ACP wants an absolute path: the process's cwd, else the runtime's working dir.
        config = getattr(self.runtime, "config", None)
        for candidate in (
            self.session_cwd,
            self.cwd,
            getattr(self.runtime, "workdir", None),
            getattr(config, "workdir", None),
        ):
            if isinstance(candidate, str) and candidate.startswith("/"):
                return candidate
        return "/"

    # -- turns ---------------------------------------------------------------------------

    def _encode_turn(self, n: int, message: Any) -> list[Any]:
        return prompt_blocks(message)  # not valid blocks / not JSON

    async def _exchange(
        self,
        n: int,
        blocks: list[Any],
        events: list[Any],
        on_event: EventCallback | None,
        deadline: float,
    ) -> Any:
        assert self._conn is not None and self.session_id is not None
        assert self._transport is not None
        if self._transport.fault is not None:  # between turns (a budget): before the prompt
            raise ProtocolError(self._transport.fault)
        texts: list[str] = []
        sink = (events, texts, on_event)
        # Sent exactly once: nothing below re-sends the prompt, whatever fails.
        self._call = call = asyncio.ensure_future(
            self._conn.prompt(session_id=self.session_id, prompt=blocks)
        )
        try:
            try:
                response = await self._answer(call, deadline, sink)
            except TimeoutError:
                await self._cancel(call, sink)
                raise
        except RequestError as e:
            # The agent is alive and answered: an error reply, not a broken session.
            raise HarnessReportedError(
                f"agent answered turn {n} with an error: {rpc_error(e)}",
                stderr_tail=self.stderr_tail,
            ) from None
        return {"text": "".join(texts), "stop_reason": response.stop_reason}

    def _end_turn(self) -> None:
        # After stop() in a failed turn: cancelled earlier, the agent's late answer to
        # the prompt would reach an SDK that no longer expects it.
        if self._call is not None:
            _forget(self._call)
            self._call = None

    async def _cancel(self, call: asyncio.Future, sink: tuple) -> None:
        """`session/cancel`, then give the agent a moment to end the prompt (ACP says it
        answers `cancelled`); its updates meanwhile still belong to the turn."""
        assert self._conn is not None and self.session_id is not None
        self._client.cancelling = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._conn.cancel(session_id=self.session_id), _CANCEL_SEND_S)
        with contextlib.suppress(TimeoutError, Exited, ProtocolError, RequestError):
            await self._answer(call, time.monotonic() + self.cancel_grace_s, sink)

    def _timeout_message(self, n: int, e: TimeoutError, timeout_s: float) -> str:
        return f"agent ended no turn {n} within {timeout_s:g} s (sent session/cancel)"

    async def _answer(self, call: Awaitable[Any], deadline: float, sink: tuple | None = None):
        """The answer to one request, pumping updates into `sink` meanwhile.

        Raises TimeoutError, Exited, ProtocolError, or the agent's RequestError.
        """
        assert self._exit_task is not None and self._fault_task is not None
        assert self._transport is not None
        call = asyncio.ensure_future(call)
        getter: asyncio.Task | None = None
        try:
            while True:
                waiters = {call, self._exit_task, self._fault_task}
                if sink is not None:
                    getter = getter or asyncio.ensure_future(self._client.updates.get())
                    waiters.add(getter)
                remaining = max(0.0, deadline - time.monotonic())
                done, _ = await asyncio.wait(
                    waiters, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
                )
                if getter is not None and getter.done():
                    await _record(getter.result(), sink)
                    getter = None
                    continue
                if self._transport.fault is not None:
                    raise ProtocolError(self._transport.fault)
                if call.done():
                    # The SDK answers a prompt only after its updates were handled.
                    while sink is not None and not self._client.updates.empty():
                        await _record(self._client.updates.get_nowait(), sink)
                    return await self._result(call)
                if self._exit_task.done():
                    # Exited: take an answer it wrote before dying, but don't wait forever.
                    await asyncio.wait({call}, timeout=EXIT_DRAIN_S)
                    if not call.done():
                        raise Exited("exited")
                    continue
                if not done:
                    raise TimeoutError
        finally:
            if getter is not None:
                getter.cancel()

    async def _result(self, call: asyncio.Future) -> Any:
        assert self._exit_task is not None
        try:
            return call.result()
        except pydantic.ValidationError as e:
            raise ProtocolError(f"the agent's answer does not follow ACP: {e}") from None
        except ConnectionError:
            # End of stdout usually means the process is exiting: say so if it did.
            await asyncio.wait({self._exit_task}, timeout=EXIT_DRAIN_S)
            raise Exited("exited" if self._exit_task.done() else "closed its stdout") from None

    # -- stop ----------------------------------------------------------------------------

    async def _detach(self) -> None:
        if self._conn is not None:
            # Stops the SDK's reader of stdout before the drain reads it too.
            with contextlib.suppress(Exception):
                await self._conn.close()
        if self._fault_task is not None:
            self._fault_task.cancel()


async def _record(item: tuple[Any, str | None], sink: tuple | None) -> None:
    assert sink is not None
    events, texts, on_event = sink
    event, text = item
    events.append(event)
    if text is not None:
        texts.append(text)
    if on_event is not None:
        result = on_event(event)
        if inspect.isawaitable(result):
            await result


def _forget(task: asyncio.Future) -> None:
    """Cancel a pending call, or mark its failure as seen (no 'never retrieved' noise)."""
    if not task.done():
        task.cancel()
    elif not task.cancelled():
        task.exception()
