"""The policy behind an OpenAI-compatible server, answering in vLLM's token fields.

Real HTTP on loopback (aiohttp, as the project's scripted upstream), one route:
POST /v1/chat/completions, not streamed. The prompt is rendered and tokenized by the
project's chat template (`episodes.model.scripted.chat_template.ChatTemplate`), so each
call's prompt ids extend the previous call's prompt and sampled ids, as a real chat
model's do. The answer carries what vLLM returns with `logprobs`,
`return_tokens_as_token_ids` and `return_token_ids`: `prompt_token_ids`,
`choices[0].token_ids` and per sampled token `{"token": "token_id:<id>", "logprob"}`.

`load(weights, version)` swaps the weights between two calls, whatever episodes are
in flight: a call is served whole by the weights it started with, and its answer's
`system_fingerprint` (`learn-policy-v<version>`) names them, so a trainer can tell
which weights sampled each call even when its episode began under older ones.

A trainer in a process of its own (`learn.process`, `--kill-trainer-at`) pushes its
weights with `POST /learn/load` (`{"version": k, "weights": [...]}`): the same swap.

`straggle_every=k`: a straggler replica. The first call of sample 0 of every k-th
task (first attempts only, by the session id the proxy sends as `X-Session-ID`) is
held until the weights have moved on twice, so that task's group falls more than one
version behind and a trainer with `max_staleness=1` sees it go stale and run again.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from typing import Any

import numpy as np
from aiohttp import web

from episodes.model.scripted.chat_template import ChatTemplate, piece_id
from episodes.net import tcp_listener
from learn.policy import Vocab, sample

FINGERPRINT = "learn-policy-v"
# `<batch>.t<task>.s<sample>:<session>` (a re-run attempt has `.r<n>` before the colon).
_SESSION = re.compile(r"\.t(\d+)\.s(\d+):")


def served_version(response: Any) -> int | None:
    """The weights version a recorded answer names (its `system_fingerprint`)."""
    fp = response.get("system_fingerprint") if isinstance(response, dict) else None
    if isinstance(fp, str) and fp.startswith(FINGERPRINT):
        return int(fp[len(FINGERPRINT) :])
    return None


class PolicyServer:
    def __init__(self, vocab: Vocab, *, seed: int = 0, straggle_every: int = 0) -> None:
        self.vocab = vocab
        self.weights = np.zeros(vocab.size)
        self.version = 0
        self.template = ChatTemplate()
        self.rng = np.random.default_rng(seed)
        self.calls = 0
        self.straggle_every = straggle_every
        self.held = 0
        self._seen: set[str] = set()
        self._moved = asyncio.Event()
        self.port: int | None = None
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def load(self, weights: np.ndarray, version: int) -> None:
        """Swap the served weights (episodes in flight go on with them from their next call)."""
        self.weights = np.array(weights, dtype=np.float64)
        self.version = version
        moved, self._moved = self._moved, asyncio.Event()
        moved.set()

    async def __aenter__(self) -> PolicyServer:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/learn/load", self._load)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        sock = tcp_listener()
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            self._moved.set()  # held calls go on, and end with the server
            await runner.cleanup()

    async def _load(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.load(np.array(body["weights"], dtype=np.float64), int(body["version"]))
        return web.json_response({"version": self.version})

    async def _chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        if body.get("stream"):
            return _error(400, "this server does not stream")
        if self._straggles(request.headers.get("X-Session-ID", "")):
            self.held += 1
            until = self.version + 2
            while self.version < until and self._runner is not None:
                await self._moved.wait()
        return web.json_response(self.complete(body), dumps=json.dumps)

    def _straggles(self, session: str) -> bool:
        match = _SESSION.search(session)
        if not self.straggle_every or match is None or session in self._seen:
            return False
        task, sample = int(match[1]), int(match[2])
        if sample != 0 or task % self.straggle_every != self.straggle_every - 1:
            return False
        self._seen.add(session)
        return True

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """The chat.completion answer to a request body (no I/O: one call, one version)."""
        prompt = [piece_id(p) for p in self.template.prompt(body.get("messages") or [], [])]
        version, weights = self.version, self.weights
        ids, lps = sample(self.vocab, weights, prompt, self.rng)
        self.calls += 1
        text = self.vocab.text(ids[0])
        entries = [
            {
                "token": f"token_id:{i}" if body.get("return_tokens_as_token_ids") else t,
                "logprob": lp,
                "bytes": list(t.encode()),
                "top_logprobs": [],
            }
            for i, lp, t in zip(ids, lps, (text, self.vocab.text(ids[1])), strict=True)
        ]
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": "stop",
            "logprobs": {"content": entries} if body.get("logprobs") else None,
        }
        out: dict[str, Any] = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or "learn-policy",
            "system_fingerprint": f"{FINGERPRINT}{version}",
            "choices": [choice],
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": len(ids),
                "total_tokens": len(prompt) + len(ids),
            },
        }
        if body.get("return_token_ids"):
            choice["token_ids"] = ids
            out["prompt_token_ids"] = prompt
        return out


def _error(status: int, message: str) -> web.Response:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": str(status)}}
    return web.json_response(body, status=status)
