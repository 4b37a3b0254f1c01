"""The client half of ACP as an episode plays it: what the agent may ask of us, the
permission policy, and how turn messages and MCP server entries are written in ACP.

`AcpDriver` (acp.py) drives the agent; this module holds the parts that do
not depend on the process, so the spec can validate `AcpPermissions` on its own.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pydantic
from acp import RequestError
from acp.interfaces import Agent
from acp.schema import (
    AgentMessageChunk,
    AllowedOutcome,
    DeniedOutcome,
    HttpHeader,
    HttpMcpServer,
    McpServerStdio,
    PromptRequest,
    RequestPermissionResponse,
    SseMcpServer,
    TextContentBlock,
)

from episodes.types.harness import AcpAllowList, AcpPermissions

McpServer = HttpMcpServer | SseMcpServer | McpServerStdio
MCP_SERVER = pydantic.TypeAdapter(McpServer)


# The policy types live with the spec (workflows load specs: no ACP SDK there).
PERMISSIONS = pydantic.TypeAdapter(AcpPermissions)


def http_mcp_server(name: str, url: str, bearer_token: str | None = None) -> HttpMcpServer:
    """An HTTP MCP server entry for `session/new` (e.g. the tool bridge)."""
    headers = []
    if bearer_token:
        headers.append(HttpHeader(name="Authorization", value=f"Bearer {bearer_token}"))
    return HttpMcpServer(type="http", name=name, url=url, headers=headers)


def prompt_blocks(message: Any) -> list[Any]:
    """The ACP content blocks for a turn's message: a str is one text block, a dict
    `{"prompt": [blocks]}` carries ACP blocks as they are, anything else is sent as
    its JSON text. Invalid blocks (or NaN) raise ValueError: the caller's bug."""
    if isinstance(message, str):
        blocks: Any = [{"type": "text", "text": message}]
    elif isinstance(message, dict) and isinstance(message.get("prompt"), list):
        blocks = message["prompt"]
    else:
        blocks = [{"type": "text", "text": json.dumps(message, allow_nan=False)}]
    return PromptRequest.model_validate({"sessionId": "-", "prompt": blocks}).prompt


class Unsupported(Exception):
    """The agent cannot take what the episode needs to offer it."""


def unsupported_mcp(init: Any, servers: list[Any]) -> None:
    """Raise Unsupported if the agent's `initialize` answer rules out an offered server."""
    caps = init.agent_capabilities.mcp_capabilities if init.agent_capabilities else None
    for server in servers:
        kind = getattr(server, "type", "stdio")  # stdio is the one every agent must take
        if kind != "stdio" and not (caps is not None and getattr(caps, kind)):
            # Dropping the server would run the episode without its tools: refuse.
            raise Unsupported(
                f"agent does not support {kind} MCP servers (mcpCapabilities.{kind}), "
                f"but the episode offers {server.name!r}"
            )


def rpc_error(e: RequestError) -> str:
    data = f" {json.dumps(e.data, default=str)}" if e.data is not None else ""
    return f"{e} (JSON-RPC error {e.code}){data}"


def as_json(model: pydantic.BaseModel) -> Any:
    """A schema object as the JSON the agent sent (camelCase keys, no nulls)."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


class EpisodeClient:
    """The ACP client methods an agent may call. Everything the turn should see (each
    `session/update`, each permission decision) is queued as `(event, text)`, `text`
    being the agent's message text when the event carries some."""

    def __init__(self, permissions: AcpPermissions) -> None:
        self.permissions = permissions
        self.updates: asyncio.Queue[tuple[Any, str | None]] = asyncio.Queue()
        self.cancelling = False  # set once a turn was cancelled: refuse what is pending

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        text = None
        if isinstance(update, AgentMessageChunk) and isinstance(update.content, TextContentBlock):
            text = update.content.text
        self.updates.put_nowait((as_json(update), text))

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any
    ) -> RequestPermissionResponse:
        policy = self.permissions
        if isinstance(policy, AcpAllowList):
            allowed = bool({tool_call.title, tool_call.kind} & set(policy.allow))
        else:
            allowed = policy == "allow"
        kinds = ("allow_once", "allow_always") if allowed else ("reject_once", "reject_always")
        chosen = next((o for k in kinds for o in options if o.kind == k), None)
        if self.cancelling or chosen is None:  # ACP: a cancelled turn's requests say so
            outcome: Any = DeniedOutcome(outcome="cancelled")
        else:
            outcome = AllowedOutcome(outcome="selected", option_id=chosen.option_id)
        event = {
            "toolCall": as_json(tool_call),
            "options": [as_json(o) for o in options],
            "outcome": as_json(outcome),
        }
        self.updates.put_nowait(({"requestPermission": event}, None))
        return RequestPermissionResponse(outcome=outcome)

    async def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        # The box's files and shells are not on this machine (see acp.py): say no.
        raise RequestError.method_not_found("fs/* and terminal/* (not offered by this client)")

    read_text_file = write_text_file = create_terminal = terminal_output = _refuse
    release_terminal = wait_for_terminal_exit = kill_terminal = _refuse

    # The rest of ACP's Client protocol, answered as the SDK answers a client without
    # them (so the connection is typed against the whole protocol): no elicitation, no
    # extensions, nothing to do on connect.
    create_elicitation = _refuse

    async def complete_elicitation(self, elicitation_id: str, **kwargs: Any) -> None:
        pass

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(f"_{method}")

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        pass

    def on_connect(self, conn: Agent) -> None:
        pass
