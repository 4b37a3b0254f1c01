"""A scripted OpenAI-compatible upstream: real HTTP on loopback, no model behind it.

For tests, benchmarks and `make demo`, where a real model would be slow, costly and
random. It answers /v1/chat/completions (streamed or not) from a `script` (a list of
steps, consumed one per call) or from a `policy` (a function of the conversation):

    step = "some text"                                   # an assistant message
         | {"tool_calls": [{"name": "put", "arguments": {"key": "a", "value": "1"}}],
            "content": None}                              # tool calls (content optional)

Like vLLM it returns token data when asked: `logprobs` per token, tokens spelled
`token_id:<id>` with `return_tokens_as_token_ids`, and `prompt_token_ids` plus
`choices[].token_ids` with `return_token_ids`. By default the "tokenizer" is a hash of
words (deterministic across runs) and the prompt a plain concatenation; with
`template=ChatTemplate()` (`episodes.model.scripted.chat_template`) prompts are rendered and
tokenized as a real chat model's are, so each call's prompt ids extend the previous
call's prompt and sampled ids (`ChatTemplate(drop_reasoning=True)` breaks that the way
reasoning models' templates do). It records every request it saw (path, headers, body)
in `requests`, checks the upstream key when given one, and fails on demand:
`fail(n, status)` for the next n calls, `always_fail = 500` for all of them.

`policy_version=N` (an attribute a test may change between calls, as a trainer pushing
weights would) names the weights serving each answer as a server that reports them
does: header `x-policy-version: N` and `system_fingerprint: "scripted-vN"` (read by a
spec's `model.policy_version_from`); `served` records it per call.

    python -m episodes.model.scripted --policy kv [--template chatml] [--policy-version N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from episodes.model.scripted.chat_template import ChatTemplate, Segment, piece_id, text_of
from episodes.model.scripted.policies import (
    POLICIES,
    Policy,
    Step,
    echo_policy,
    kv_policy,
    think_policy,
    token_id,
    tokenize,
)
from episodes.net import tcp_listener

__all__ = [
    "POLICIES",
    "TEMPLATES",
    "Policy",
    "ScriptedUpstream",
    "Step",
    "echo_policy",
    "kv_policy",
    "think_policy",
    "token_id",
    "tokenize",
]

Gate = Callable[[dict[str, Any]], Awaitable[None]]

# How an answer names the weights that served it (`policy_version`, see the module doc).
VERSION_HEADER = "x-policy-version"
FINGERPRINT = "scripted-v"


# -- the server -------------------------------------------------------------------------


def _tool_calls(step: dict[str, Any]) -> list[dict[str, Any]]:
    calls = []
    for i, call in enumerate(step.get("tool_calls") or []):
        args = call.get("arguments", {})
        calls.append(
            {
                "id": call.get("id") or f"call_{uuid.uuid4().hex[:12]}",
                "type": "function",
                "function": {
                    "name": call["name"],
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                },
                "_index": i,
            }
        )
    return calls


class ScriptedUpstream:
    def __init__(
        self,
        script: list[Step] | None = None,
        *,
        policy: Policy | None = None,
        key: str | None = None,
        model: str = "scripted",
        delay_s: float = 0.0,
        port: int = 0,
        template: ChatTemplate | None = None,
        gate: Gate | None = None,
        policy_version: int | None = None,
    ) -> None:
        self.script = list(script or [])
        # The weights' version each answer names (None: answers name none).
        self.policy_version = policy_version
        self.template = template
        # Awaited with each chat request (`{path, headers, body}`, as in `requests`)
        # before it is answered: tests and demos hold some calls with it (a straggler
        # replica) while others go on. `X-Session-ID` names the episode.
        self.gate = gate
        self._bind_port = port
        self.policy = policy
        self.key = key
        self.model = model
        self.delay_s = delay_s
        self.requests: list[dict[str, Any]] = []
        # Per answered chat call: the prompt ids, sampled ids and logprobs it served.
        self.served: list[dict[str, Any]] = []
        self.always_fail: int | None = None
        self._failures: list[int] = []
        self.port: int | None = None
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def fail(self, n: int, status: int = 500) -> None:
        """The next `n` chat calls answer `status` (500, 429, ...)."""
        self._failures.extend([status] * n)

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"].endswith("/chat/completions")]

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        sock = tcp_listener(port=self._bind_port)
        self.port = sock.getsockname()[1]
        # A backlog for a burst of connections (aiohttp listens with 128: 256 clients
        # connecting at once had SYNs dropped and waited out connect timeouts).
        await web.SockSite(self._runner, sock, backlog=4096).start()

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def __aenter__(self) -> ScriptedUpstream:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _denied(self, request: web.Request) -> web.Response | None:
        if self.key is not None and request.headers.get("Authorization") != f"Bearer {self.key}":
            return _error(401, "bad upstream key")
        return None

    async def _models(self, request: web.Request) -> web.Response:
        self.requests.append({"path": request.path, "headers": dict(request.headers), "body": None})
        denied = self._denied(request)
        return denied or web.json_response(
            {"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "me"}]}
        )

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        seen = {"path": request.path, "headers": dict(request.headers), "body": body}
        self.requests.append(seen)
        denied = self._denied(request)
        if denied:
            return denied
        if self.gate is not None:
            await self.gate(seen)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.always_fail is not None or self._failures:
            status = self.always_fail if self.always_fail is not None else self._failures.pop(0)
            return _error(status, f"scripted failure (HTTP {status})")
        if self.policy is not None:
            step = self.policy(body.get("messages") or [], body.get("tools") or [])
        elif self.script:
            step = self.script.pop(0)
        else:
            return _error(400, "the script is exhausted")
        step = {"content": step} if isinstance(step, str) else step
        version = self.policy_version  # the weights serving this answer, whole
        if body.get("stream"):
            return await self._stream(request, body, step, version)
        return web.json_response(
            self._completion(body, step, version), headers=_version_header(version)
        )

    # -- answers -------------------------------------------------------------------------

    def _segments(self, step: dict[str, Any], calls: list[dict[str, Any]]) -> list[Segment]:
        """The completion as (delta, token pieces) segments, streamed one chunk each."""
        if self.template is not None:
            return self.template.completion(step.get("content"), calls)
        segments: list[Segment] = [
            ({"content": t}, [t]) for t in tokenize(step.get("content") or "")
        ]
        for call in calls:
            head = {"index": call["_index"], "id": call["id"], "type": "function"}
            head["function"] = {"name": call["function"]["name"], "arguments": ""}
            segments.append(({"tool_calls": [head]}, []))
            for t in tokenize(call["function"]["arguments"]):
                arg = {"index": call["_index"], "function": {"arguments": t}}
                segments.append(({"tool_calls": [arg]}, [t]))
        return segments

    def _id(self, piece: str) -> int:
        return piece_id(piece) if self.template is not None else token_id(piece)

    def _logprobs(
        self, body: dict[str, Any], pieces: list[str], first: int
    ) -> list[dict[str, Any]]:
        """vLLM's logprob entries for `pieces`, the `first`-th sampled token onwards."""
        out = []
        for i, tok in enumerate(pieces, first):
            shown = f"token_id:{self._id(tok)}" if body.get("return_tokens_as_token_ids") else tok
            lp = -round(0.05 + 0.1 * (i % 7), 4)
            out.append(
                {"token": shown, "logprob": lp, "bytes": list(tok.encode()), "top_logprobs": []}
            )
        return out

    def _prompt_ids(self, body: dict[str, Any]) -> list[int]:
        messages, tools = body.get("messages") or [], body.get("tools") or []
        if self.template is not None:
            return [piece_id(p) for p in self.template.prompt(messages, tools)]
        ids = []
        for m in messages:
            ids.append(token_id(f"<|{m.get('role')}|>"))
            ids.extend(token_id(t) for t in tokenize(text_of(m.get("content"))))
        return ids

    def _completion(
        self, body: dict[str, Any], step: dict[str, Any], version: int | None
    ) -> dict[str, Any]:
        content = step.get("content")
        calls = _tool_calls(step)
        pieces = [p for _, seg in self._segments(step, calls) for p in seg]
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = [{k: v for k, v in c.items() if k != "_index"} for c in calls]
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "finish_reason": "tool_calls" if calls else "stop",
            "logprobs": {"content": self._logprobs(body, pieces, 0)}
            if body.get("logprobs")
            else None,
        }
        call_id = f"chatcmpl-{uuid.uuid4().hex[:12]}"
        out = self._envelope("chat.completion", [choice], call_id, version)
        prompt = self._prompt_ids(body)
        if body.get("return_token_ids"):
            choice["token_ids"] = [self._id(p) for p in pieces]
            out["prompt_token_ids"] = prompt
        out["usage"] = _usage(len(prompt), len(pieces))
        self._served(body, prompt, pieces, version)
        return out

    def _served(
        self, body: dict[str, Any], prompt: list[int], pieces: list[str], version: int | None
    ) -> None:
        lps = [e["logprob"] for e in self._logprobs(body, pieces, 0)]
        ids = [self._id(p) for p in pieces]
        self.served.append(
            {
                "prompt_token_ids": prompt,
                "token_ids": ids,
                "logprobs": lps,
                "policy_version": version,
            }
        )

    def _envelope(
        self, kind: str, choices: list[dict[str, Any]], call_id: str, version: int | None = None
    ) -> dict[str, Any]:
        out = {
            "id": call_id,
            "object": kind,
            "created": int(time.time()),
            "model": self.model,
            "choices": choices,
        }
        if version is not None:
            out["system_fingerprint"] = f"{FINGERPRINT}{version}"
        return out

    async def _stream(
        self, request: web.Request, body: dict[str, Any], step: dict[str, Any], version: int | None
    ) -> web.StreamResponse:
        call_id = f"chatcmpl-{uuid.uuid4().hex[:12]}"
        want_ids, want_lp = bool(body.get("return_token_ids")), bool(body.get("logprobs"))
        chunks: list[dict[str, Any]] = []
        first = self._envelope(
            "chat.completion.chunk",
            [_delta({"role": "assistant", "content": ""})],
            call_id,
            version,
        )
        prompt = self._prompt_ids(body)
        if want_ids:
            first["prompt_token_ids"] = prompt
        chunks.append(first)
        n = 0
        calls = _tool_calls(step)
        segments = self._segments(step, calls)
        self._served(body, prompt, [p for _, seg in segments for p in seg], version)
        for delta, pieces in segments:
            c = _delta(delta)
            if pieces and want_lp:
                c["logprobs"] = {"content": self._logprobs(body, pieces, n)}
            if pieces and want_ids:
                c["token_ids"] = [self._id(p) for p in pieces]
            n += len(pieces)
            chunks.append(self._envelope("chat.completion.chunk", [c], call_id, version))
        last = _delta({}, finish="tool_calls" if calls else "stop")
        chunks.append(self._envelope("chat.completion.chunk", [last], call_id, version))
        if (body.get("stream_options") or {}).get("include_usage"):
            tail = self._envelope("chat.completion.chunk", [], call_id, version)
            tail["usage"] = _usage(len(prompt), n)
            chunks.append(tail)
        out = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", **_version_header(version)}
        )
        await out.prepare(request)
        for c in chunks:
            await out.write(f"data: {json.dumps(c)}\n\n".encode())
        await out.write(b"data: [DONE]\n\n")
        await out.write_eof()
        return out


def _version_header(version: int | None) -> dict[str, str]:
    return {} if version is None else {VERSION_HEADER: str(version)}


def _delta(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _error(status: int, message: str) -> web.Response:
    kind = "rate_limit_error" if status == 429 else "server_error"
    body = {"error": {"message": message, "type": kind, "code": str(status), "param": None}}
    return web.json_response(body, status=status)


TEMPLATES: dict[str, ChatTemplate | None] = {
    "words": None,
    "chatml": ChatTemplate(),
    "chatml-drop-reasoning": ChatTemplate(drop_reasoning=True),
}


async def _serve(
    policy: str, key: str | None, port: int, template: str, version: int | None
) -> None:
    up = ScriptedUpstream(
        policy=POLICIES[policy],
        key=key,
        port=port,
        template=TEMPLATES[template],
        policy_version=version,
    )
    async with up:
        print(up.base_url, flush=True)
        await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m episodes.model.scripted")
    parser.add_argument("--policy", choices=sorted(POLICIES), default="kv")
    parser.add_argument("--key", default=None, help="require this upstream key")
    parser.add_argument("--port", type=int, default=0, help="loopback port (default: any free)")
    parser.add_argument(
        "--template", choices=sorted(TEMPLATES), default="words", help="how prompts tokenize"
    )
    parser.add_argument(
        "--policy-version",
        type=int,
        default=None,
        help="name these weights in each answer (header x-policy-version, system_fingerprint)",
    )
    args = parser.parse_args()
    try:
        asyncio.run(_serve(args.policy, args.key, args.port, args.template, args.policy_version))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
