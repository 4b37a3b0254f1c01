"""The processes `bench.agents_scale` runs beside the worker: the upstreams and the harnesses.

    python -m bench.scale_procs upstream [--chunks 180]      # prints its port, serves until killed
    python -m bench.scale_procs load                          # a JSON job on stdin (below)
    python -m bench.scale_procs hold                          # live harnesses (see `hold`)

Plain calls go to the product's scripted upstream (`python -m episodes.model.scripted`,
its own process, started by `bench.agents_scale`), answering with token data when
asked as vLLM does. Streamed calls go to `upstream` here, which answers with canned
bytes (built once): the proxy's cost per chunk is what is measured, not a model's or a
tokenizer's. A streamed answer is `--chunks` content chunks, a finish chunk and a
usage chunk, each written on its own with a yield to the loop between them (a real
server emits tokens one at a time, so the proxy reads them in many small pieces, not
in one buffer).

The load process plays the harnesses of every session, shaped as its users' are: one
official OpenAI SDK client per session (its own base URL and token, and its own
connection pool: the SDK's default httpx client, `DefaultAsyncHttpxClient`, sharing
one TLS context, which would otherwise cost ~50 ms each to load), every session calling
in a loop, all sessions at once, each call sending a ~700-byte conversation
(`PROMPT`). It reads `{"targets": [[base_url, token], ...], "calls": k, "stream":
bool, "token_data": bool}` (`token_data`: the call itself asks for the token fields,
as a direct call must to get what `model.token_data: true` makes the proxy ask for),
warms each session with one call, prints `ready`, waits for a line on stdin, runs k
calls per session and prints `{"seconds": ..., "calls": ...}`.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

MESSAGES = [
    {"role": "system", "content": "You are a careful agent. Answer briefly."},
    {"role": "user", "content": "measure me, please, with a few words"},
]
# What a harness's call carries (~700 bytes of messages, as JSON): a system prompt and
# a task, as an agent's first call of an episode does.
PROMPT = [
    {
        "role": "system",
        "content": "You are a careful coding agent working in a sandboxed repository. "
        "Think about the task, call tools when you need facts, and answer briefly with "
        "the change you made and why. Never invent file contents you have not read.",
    },
    {
        "role": "user",
        "content": "The test suite fails in tests/test_parser.py: the parser drops the "
        "last field of a quoted CSV line when it ends with an escaped quote. Find the "
        "cause in src/parser.py, fix it without changing the public API, and add a "
        "regression test next to the failing one. Report the diff in a few lines.",
    },
]


def _chunk(i: int, delta: dict, finish: str | None = None, usage: dict | None = None) -> bytes:
    body: dict = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m",
        "choices": [] if usage else [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage:
        body["usage"] = usage
    return f"data: {json.dumps(body)}\n\n".encode()


async def upstream(chunks: int) -> None:
    from aiohttp import web

    words = [f" w{i}" for i in range(chunks)]
    usage = {"prompt_tokens": 20, "completion_tokens": chunks, "total_tokens": 20 + chunks}
    plain = json.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "you said: measure me"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
        }
    ).encode()
    stream = [_chunk(0, {"role": "assistant", "content": ""})]
    stream += [_chunk(i, {"content": w}) for i, w in enumerate(words)]
    stream += [_chunk(0, {}, "stop"), _chunk(0, {}, usage=usage), b"data: [DONE]\n\n"]

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if b'"stream":true' not in body.replace(b" ", b""):
            return web.Response(body=plain, content_type="application/json")
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        for piece in stream:
            await out.write(piece)
            await asyncio.sleep(0)
        await out.write_eof()
        return out

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=4096)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(port, flush=True)
    await asyncio.Event().wait()


async def load() -> None:
    import ssl

    import httpx
    import openai

    from episodes.types.model import TOKEN_DATA_PARAMS

    job = json.loads(sys.stdin.readline())
    tls = ssl.create_default_context()  # one for all (loopback is plain HTTP anyway)
    https = [openai.DefaultAsyncHttpxClient(verify=tls) for _ in job["targets"]]
    # The SDK's timeouts but a longer connect: 256 clients in one process on a busy
    # machine can leave a connect unread past the SDK's 5 s (the calls then fail).
    timeout = httpx.Timeout(600, connect=60)
    clients = [
        openai.AsyncOpenAI(
            base_url=url, api_key=token, max_retries=0, http_client=http, timeout=timeout
        )
        for (url, token), http in zip(job["targets"], https, strict=True)
    ]
    stream = bool(job["stream"])
    extra = dict(TOKEN_DATA_PARAMS) if job.get("token_data") else None

    async def one(client: openai.AsyncOpenAI) -> None:
        if stream:
            async for _ in await client.chat.completions.create(
                model="m", messages=MESSAGES, stream=True
            ):
                pass
        else:
            await client.chat.completions.create(
                model="m",
                messages=PROMPT,  # type: ignore[arg-type]
                extra_body=extra,
            )

    errors: list[str] = []

    async def session(client: openai.AsyncOpenAI, calls: int) -> None:
        for _ in range(calls):
            try:
                await one(client)
            except openai.APIError as e:  # counted: a benchmark with errors is refused
                errors.append(f"{time.perf_counter() - t0:.2f}s {e!r} {e.__cause__!r}")

    # Warm: connections, imports (the first failure, if any, says why).
    warm = await asyncio.gather(*(one(c) for c in clients), return_exceptions=True)
    failed = [e for e in warm if isinstance(e, BaseException)]
    if failed:
        cause = failed[0].__cause__ or failed[0]
        print(f"{len(failed)} warm-up calls failed: {cause!r}", flush=True)
        return
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    t0, cpu0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(session(c, job["calls"]) for c in clients))
    seconds = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    total = job["calls"] * len(clients)
    print(
        json.dumps({"seconds": seconds, "calls": total, "cpu_s": cpu, "errors": errors[:5]}),
        flush=True,
    )
    for http in https:
        await http.aclose()


async def hold() -> None:
    """Play live harnesses: per session an MCP session (initialized, tools listed, one
    tool call) and one model call, both connections then held open until a line comes
    on stdin. Reads `{"targets": [[mcp_url, mcp_token, model_url, model_token], ...]}`."""
    import httpx
    import httpx2
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    job = json.loads(sys.stdin.readline())
    release = asyncio.Event()
    ready = 0
    failed: list[str] = []

    async def one(mcp_url: str, mcp_token: str, model_url: str, model_token: str) -> None:
        nonlocal ready
        try:
            async with (
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {mcp_token}"}) as h2,
                Client(streamable_http_client(mcp_url, http_client=h2), cache=None) as mcp,
                httpx.AsyncClient(verify=False, timeout=60) as http,
            ):
                await mcp.list_tools()
                await mcp.call_tool("put", {"key": "k", "value": "v"})
                resp = await http.post(
                    model_url + "/chat/completions",
                    json={"model": "m", "messages": MESSAGES},
                    headers={"Authorization": f"Bearer {model_token}"},
                )
                resp.raise_for_status()
                ready += 1
                await release.wait()
        except Exception as e:
            failed.append(repr(e))
            ready += 1

    tasks = []
    for i in range(0, len(job["targets"]), 50):  # in waves: the worker is one process
        tasks += [asyncio.create_task(one(*t)) for t in job["targets"][i : i + 50]]
        while ready < len(tasks):
            await asyncio.sleep(0.05)
    print(json.dumps({"ready": ready - len(failed), "failed": failed[:3]}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    release.set()
    await asyncio.gather(*tasks)


if __name__ == "__main__":
    if sys.argv[1] == "hold":
        asyncio.run(hold())
    elif sys.argv[1] == "upstream":
        n = int(sys.argv[sys.argv.index("--chunks") + 1]) if "--chunks" in sys.argv else 180
        asyncio.run(upstream(n))
    else:
        asyncio.run(load())
