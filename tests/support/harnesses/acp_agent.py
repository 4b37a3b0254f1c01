"""A real ACP agent (the SDK's agent side) that behaves, and misbehaves, on request.

argv[1] picks how it starts: `ok`, `never-init` (reads nothing, says nothing),
`exit-now` (exits 3 before initialize), `no-http-mcp` (does not advertise HTTP MCP), `commands` (sends an
`available_commands_update` right after session/new, outside any turn).
Each prompt's text is a command:

  anything          streams a thought and three message chunks: pid, count, memory
  permission T      asks permission for a tool call titled T (kind "execute")
  mcp TOOL JSON     calls TOOL on the first MCP server offered in session/new
  ask TEXT          asks the model at OPENAI_BASE_URL (with OPENAI_API_KEY) and says its answer
  crash             streams a chunk, then dies with exit code 7
  hang              never answers until session/cancel (logged to stderr)
  garbage           writes a line that is not JSON to stdout
  deep N            writes a JSON-RPC notification nested N levels deep to stdout
  flood N KB        streams N message chunks of KB KiB each, then answers
  flood-later N KB  answers at once, then streams N thought chunks of KB KiB (between turns)
  error             answers the prompt with a JSON-RPC error
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from acp import (
    PROTOCOL_VERSION,
    RequestError,
    run_agent,
    start_tool_call,
    update_agent_message_text,
    update_agent_thought_text,
)
from acp.helpers import update_available_commands
from acp.schema import (
    AgentCapabilities,
    AvailableCommand,
    InitializeResponse,
    McpCapabilities,
    NewSessionResponse,
    PermissionOption,
    PromptResponse,
    ToolCallUpdate,
)

MODE = sys.argv[1] if len(sys.argv) > 1 else "ok"


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class ScriptedAgent:
    def __init__(self) -> None:
        self.conn = None
        self.memory: list[str] = []
        self.mcp_servers: list = []
        self.cancelled = asyncio.Event()

    def on_connect(self, conn) -> None:
        self.conn = conn

    async def initialize(self, protocol_version, client_capabilities=None, client_info=None, **kw):
        log(f"initialize from {client_info.name if client_info else None}")
        http = MODE != "no-http-mcp"
        caps = AgentCapabilities(mcp_capabilities=McpCapabilities(http=http))
        return InitializeResponse(protocol_version=PROTOCOL_VERSION, agent_capabilities=caps)

    async def new_session(self, cwd, additional_directories=None, mcp_servers=None, **kw):
        self.mcp_servers = list(mcp_servers or [])
        log(f"session/new cwd={cwd} mcp={[s.name for s in self.mcp_servers]}")
        session_id = f"s-{os.getpid()}"
        if MODE == "commands":
            command = AvailableCommand(name="plan", description="make a plan")
            update = update_available_commands([command])
            self.pending = asyncio.ensure_future(self.conn.session_update(session_id, update))
        return NewSessionResponse(session_id=session_id)

    async def cancel(self, session_id, **kw) -> None:
        log(f"saw session/cancel for {session_id}")
        self.cancelled.set()

    async def prompt(self, session_id, prompt, **kw) -> PromptResponse:
        text = "".join(getattr(block, "text", "") for block in prompt)
        command, _, rest = text.partition(" ")
        say = self._sayer(session_id)
        if command == "permission":
            await say(f"permission {rest}: {await self._ask(session_id, rest)}")
        elif command == "mcp":
            await say(await self._call_mcp(rest))
        elif command == "ask":
            await say(await asyncio.to_thread(_ask_model, rest))
        elif command == "crash":
            await say("about to crash")
            log("crash: dying mid-turn")
            os._exit(7)
        elif command == "hang":
            log("hang: not answering until cancelled")
            await self.cancelled.wait()
            return PromptResponse(stop_reason="cancelled")
        elif command == "garbage":
            os.write(1, b"hello, I am not JSON\n")
            await asyncio.sleep(3600)
        elif command == "deep":
            depth = int(rest or "5000")
            nested = b"[" * depth + b"]" * depth
            os.write(1, b'{"jsonrpc":"2.0","method":"session/update","params":' + nested + b"}\n")
            await asyncio.sleep(3600)
        elif command in ("flood", "flood-later"):
            n, kb = (int(x) for x in rest.split())

            async def flood() -> None:
                for _ in range(n):
                    chunk = update_agent_thought_text("t" * (kb * 1024))
                    await self.conn.session_update(session_id, chunk)

            if command == "flood":
                await flood()
            else:
                self.pending = asyncio.ensure_future(flood())
        elif command == "error":
            raise RequestError.internal_error({"details": "scripted failure"})
        else:
            await self.conn.session_update(session_id, update_agent_thought_text(f"on {text!r}"))
            self.memory.append(text)
            for chunk in (
                f"pid={os.getpid()}",
                f";count={len(self.memory)}",
                ";seen=",
                "|".join(self.memory),
            ):
                await say(chunk)
        return PromptResponse(stop_reason="end_turn")

    def _sayer(self, session_id):
        async def say(text: str) -> None:
            await self.conn.session_update(session_id, update_agent_message_text(text))

        return say

    async def _ask(self, session_id: str, title: str) -> str:
        call_id = f"call-{len(self.memory)}-{title}"
        await self.conn.session_update(session_id, start_tool_call(call_id, title, kind="execute"))
        options = [
            PermissionOption(option_id="yes", name="Allow", kind="allow_once"),
            PermissionOption(option_id="no", name="Reject", kind="reject_once"),
        ]
        tool_call = ToolCallUpdate(tool_call_id=call_id, title=title, kind="execute")
        answer = await self.conn.request_permission(
            session_id=session_id, tool_call=tool_call, options=options
        )
        outcome = answer.outcome
        return f"selected:{outcome.option_id}" if outcome.outcome == "selected" else "cancelled"

    async def _call_mcp(self, rest: str) -> str:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        tool, _, args = rest.partition(" ")
        server = self.mcp_servers[0]
        headers = {h.name: h.value for h in server.headers}
        async with (
            httpx2.AsyncClient(headers=headers) as http,
            Client(streamable_http_client(server.url, http_client=http)) as client,
        ):
            result = await client.call_tool(tool, json.loads(args or "{}"))
        texts = [c.text for c in result.content if getattr(c, "type", None) == "text"]
        return f"{server.name}.{tool} -> {' '.join(texts)}"


async def main() -> None:
    if MODE == "exit-now":
        log("exit-now: cannot load the agent config")
        sys.exit(3)
    if MODE == "never-init":
        log("never-init: not reading anything")
        await asyncio.sleep(3600)
    await run_agent(ScriptedAgent())


def _ask_model(text: str) -> str:
    """One chat completion, plain HTTP (what any agent's OpenAI client sends)."""
    import urllib.request

    body = json.dumps({"model": "any", "messages": [{"role": "user", "content": text}]})
    req = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        data=body.encode(),
        headers={
            "Authorization": f"Bearer {os.environ['OPENAI_API_KEY']}",
            "Content-Type": "application/json",
        },
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        answer = json.load(resp)
    return "model: " + answer["choices"][0]["message"]["content"]


if __name__ == "__main__":
    asyncio.run(main())
