"""LLM harness: an OpenAI-compatible model with MCP tools, one conversation across turns.

    python -m episodes.harness.reference.llm [--max-steps 16] [--stream] [--model NAME] [--system TEXT]

Environment (the session sets these; nothing else is read):
- `OPENAI_BASE_URL`, `OPENAI_API_KEY`: the model endpoint, normally the session's
  model proxy (`episodes.model.proxy`) and its per-session token;
- `EPISODES_MCP_URL`, `EPISODES_MCP_TOKEN`: an MCP server (streamable HTTP, bearer
  token) whose tools the model may call; without them the model gets no tools.

Each turn's message (text, or `{"content": text}`; anything else is sent as JSON) is
appended to the conversation, then the model runs a tool-calling loop of at most
`--max-steps` model calls: every model step (`kind: model_step`) and every tool
result it got (`kind: tool_result`) is streamed as an `event` (the session's bridge
and proxy record the authoritative `tool_call` and `model_call` events), and the reply is the final assistant text. A failed model call ends the
turn with an `error` packet of one line (`model call failed: HTTP 502: ...`); the
harness stays up. The conversation and the MCP session live in this process only:
an asyncio loop on a thread holds them while the protocol loop (`serve`, sdk.serve's
twin) runs on the main thread.

Needs `openai` and `mcp` (`pip install 'episodes[llm]'`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import traceback
from typing import Any

from episodes.harness import sdk
from episodes.model.stream import assemble


class ProviderError(Exception):
    """The model call failed; the message is the one line the error packet carries."""


def _one_line(text: str, limit: int = 400) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _first_leaf(e: BaseException) -> BaseException:
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    return e


def _as_text(message: Any) -> str:
    if isinstance(message, str):
        return message
    if isinstance(message, dict) and isinstance(message.get("content"), str):
        return message["content"]
    return json.dumps(message, ensure_ascii=False)


class Agent:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.history: list[dict[str, Any]] = []
        if args.system:
            self.history.append({"role": "system", "content": args.system})
        self.tools: list[dict[str, Any]] = []
        self.mcp: Any = None
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._closing: asyncio.Event | None = None
        self._mcp_task: asyncio.Task[None] | None = None
        self._client: Any = None

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    # -- lifecycle -----------------------------------------------------------------------

    def setup(self) -> None:
        self._thread.start()
        try:
            self._run(self._setup())
        except Exception as e:
            print(f"llm harness: {_one_line(str(e))}", file=sys.stderr)
            sys.exit(2)

    async def _setup(self) -> None:
        import openai

        # No retries here: the session's proxy retries, and two layers would multiply.
        self._client = openai.AsyncOpenAI(max_retries=0, timeout=self.args.timeout)
        url = os.environ.get("EPISODES_MCP_URL")
        if not url:
            return
        self._closing = asyncio.Event()
        ready: asyncio.Future[None] = self.loop.create_future()
        # One task owns the MCP session from open to close (anyio scopes require it);
        # turns call tools on it from other tasks.
        self._mcp_task = asyncio.create_task(self._hold_mcp(url, ready))
        try:
            await ready
        except Exception as e:
            raise RuntimeError(
                f"cannot list the MCP tools at {url}: {type(e).__name__}: {_one_line(str(e), 200)}"
            ) from None

    async def _hold_mcp(self, url: str, ready: asyncio.Future[None]) -> None:
        import httpx2
        from mcp.client import Client
        from mcp.client.streamable_http import streamable_http_client

        token = os.environ.get("EPISODES_MCP_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            timeout = httpx2.Timeout(30.0, read=300.0)
            async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
                async with Client(streamable_http_client(url, http_client=http)) as client:
                    cursor = None
                    while True:
                        listed = await client.list_tools(cursor=cursor)
                        self.tools.extend(_openai_tool(t) for t in listed.tools)
                        cursor = listed.next_cursor
                        if not cursor:
                            break
                    self.mcp = client
                    ready.set_result(None)
                    assert self._closing is not None
                    await self._closing.wait()
        except BaseException as e:
            leaf = _first_leaf(e)
            if not ready.done():
                ready.set_exception(leaf if isinstance(leaf, Exception) else RuntimeError(leaf))
            elif not isinstance(leaf, asyncio.CancelledError):
                print(f"llm harness: MCP session ended: {leaf!r}", file=sys.stderr)
        finally:
            self.mcp = None

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        self._run(self._close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)

    async def _close(self) -> None:
        if self._mcp_task is not None and self._closing is not None:
            self._closing.set()
            try:
                await asyncio.wait_for(self._mcp_task, 5)
            except (TimeoutError, asyncio.CancelledError):
                pass
        if self._client is not None:
            await self._client.close()

    # -- turns ---------------------------------------------------------------------------

    def handle(self, turn: int, message: Any, emit: Any) -> str:
        return self._run(self._turn(message, emit))

    async def _turn(self, message: Any, emit: Any) -> str:
        self.history.append({"role": "user", "content": _as_text(message)})
        content = ""
        for step in range(self.args.max_steps):
            completion = await self._complete()
            choice = (completion.get("choices") or [{}])[0]
            msg = choice.get("message") or {}
            content = msg.get("content") or ""
            calls = msg.get("tool_calls") or []
            assistant: dict[str, Any] = {"role": "assistant", "content": content}
            if calls:
                assistant["tool_calls"] = [
                    {"id": c["id"], "type": "function", "function": c["function"]} for c in calls
                ]
            self.history.append(assistant)
            emit(
                {
                    "kind": "model_step",
                    "step": step,
                    "content": content,
                    "tool_calls": [c["function"] for c in calls],
                    "finish_reason": choice.get("finish_reason"),
                    "usage": completion.get("usage"),
                }
            )
            if not calls:
                return content
            for c in calls:
                name, raw = c["function"]["name"], c["function"].get("arguments") or ""
                result, is_error = await self._call_tool(name, raw)
                emit(
                    {
                        "kind": "tool_result",
                        "step": step,
                        "name": name,
                        "arguments": raw,
                        "result": result,
                        "is_error": is_error,
                    }
                )
                self.history.append({"role": "tool", "tool_call_id": c["id"], "content": result})
        emit({"kind": "step_limit", "max_steps": self.args.max_steps})
        return content

    async def _complete(self) -> dict[str, Any]:
        import openai

        kwargs: dict[str, Any] = {"model": self.args.model, "messages": self.history}
        if self.tools:
            kwargs["tools"] = self.tools
        try:
            if not self.args.stream:
                return (await self._client.chat.completions.create(**kwargs)).model_dump()
            stream = await self._client.chat.completions.create(stream=True, **kwargs)
            chunks = [chunk.model_dump() async for chunk in stream]
            return assemble(chunks)
        except openai.APIStatusError as e:
            raise ProviderError(
                f"model call failed: HTTP {e.status_code}: {_one_line(_status_text(e))}"
            ) from None
        except openai.APIError as e:  # connection errors, timeouts, error events mid-stream
            raise ProviderError(f"model call failed: {_one_line(e.message)}") from None

    async def _call_tool(self, name: str, raw: str) -> tuple[str, bool]:
        """The tool's text result and whether it is an error (told to the model, not raised)."""
        if self.mcp is None:
            return f"error: no tool named {name!r} (no MCP server)", True
        try:
            args = json.loads(raw) if raw.strip() else {}
        except ValueError as e:
            return f"error: the arguments are not JSON ({e})", True
        if not isinstance(args, dict):
            return "error: the arguments must be a JSON object", True
        try:
            result = await self.mcp.call_tool(name, args)
        except Exception as e:
            return f"error: {type(_first_leaf(e)).__name__}: {_one_line(str(_first_leaf(e)))}", True
        texts = [getattr(b, "text", None) for b in result.content]
        text = "\n".join(t for t in texts if t is not None)
        if not text and result.structured_content is not None:
            text = json.dumps(result.structured_content, ensure_ascii=False)
        return text, bool(result.is_error)


def _status_text(e: Any) -> str:
    """The server's own error message (the SDK's `message` wraps it in "Error code: ...")."""
    body = e.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
    return str(e.message)


def _openai_tool(tool: Any) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description or "",
            "parameters": tool.input_schema or {"type": "object", "properties": {}},
        },
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m episodes.harness.reference.llm")
    parser.add_argument("--max-steps", type=int, default=16, help="model calls per turn")
    parser.add_argument("--stream", action="store_true", help="stream the model's answers")
    parser.add_argument("--model", default=os.environ.get("EPISODES_MODEL", "default"))
    parser.add_argument("--system", default=None, help="a system prompt")
    parser.add_argument("--timeout", type=float, default=600.0, help="per model call, seconds")
    args = parser.parse_args(argv)
    agent = Agent(args)
    try:
        serve(agent)
    finally:
        agent.close()


def serve(agent: Agent) -> None:
    """`sdk.serve`, except that a failed model call is an error packet with no traceback.

    The session appends the harness's stderr tail to a turn's error, so a traceback
    there would bury the one line that says what happened.
    """
    sdk.die_with_parent()
    # As sdk.serve: private protocol pipes; fds 0/1 become /dev/null and stderr.
    proto_in = os.fdopen(os.dup(0), "rb")
    proto_out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    lock = threading.Lock()

    def send(packet: dict[str, Any]) -> None:
        data = sdk.encode(packet)
        with lock:
            proto_out.write(data)
            proto_out.flush()

    agent.setup()
    send({"type": "ready"})
    while True:
        packet = sdk.read_packet(proto_in)
        if packet is None or packet.get("type") == "shutdown":
            break
        if packet.get("type") != "turn":
            print(f"llm harness: ignoring unexpected packet {packet!r}", file=sys.stderr)
            continue
        n = packet["turn"]

        def emit(event: Any, n: int = n) -> None:
            send({"type": "event", "turn": n, "event": event})

        try:
            reply = agent.handle(n, packet.get("message"), emit)
            send({"type": "reply", "turn": n, "message": reply})
        except ProviderError as e:
            send({"type": "error", "turn": n, "error": str(e)})
        except Exception as e:
            traceback.print_exc(file=sys.stderr)
            send({"type": "error", "turn": n, "error": f"{type(e).__name__}: {_one_line(str(e))}"})
    sys.stderr.flush()


if __name__ == "__main__":
    main()
