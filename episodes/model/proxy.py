"""The model proxy: one OpenAI-compatible endpoint per session, on loopback, for the harness.

    proxy = ModelProxy(spec, on_call=record)      # spec: episodes.types.model.ModelSpec
    await proxy.start()
    harness_env.update(proxy.env())               # OPENAI_BASE_URL, OPENAI_API_KEY
    ...
    await proxy.stop()
    if proxy.failure: ...                         # a ModelError: end with `model_error`

Why a proxy: the trainer needs every model call (with the token ids and logprobs the
upstream returned), the batch needs every call sampled alike, and the harness (any
program, possibly hostile) must never hold the upstream key. So the harness gets a
per-session token and a loopback URL; the proxy checks the token (wrong or missing:
401, never forwarded), forces `model` and `params` over the harness's values, adds the
upstream key, retries 429 / 5xx / timeouts / connection errors with exponential
backoff, and hands each finished call to `on_call`.

When retries run out the harness gets HTTP 502 with an OpenAI-style error body, and
the proxy reports a `ModelError` (one line, never the key): kept in `proxy.failure`
(the first one) and passed to `on_failure`. Other 4xx answers are the harness's own
mistakes: passed through as they are, not retried, not failures.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import secrets
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from episodes.aio import finish
from episodes.errors import ModelError
from episodes.json_depth import text_too_deep, too_deep_message
from episodes.model.conversation import Conversations
from episodes.model.fastjson import loads
from episodes.model.fleet import Replica
from episodes.model.record import (
    Callback,
    call_record,
    harness_error,
    notify,
    openai_error,
    read_upstream_key,
)
from episodes.model.sender import SESSION_HEADER, Exhausted, Sender, error_text, one_line
from episodes.model.serve import Bounds, HttpServer, Refusal, Request
from episodes.model.stream import assemble, stream_chunks
from episodes.model.upstream import SlowReader, UpstreamError
from episodes.net import tcp_listener
from episodes.replay import Divergence, Replay, raw_to_record
from episodes.types.harness import HarnessLimits
from episodes.types.model import ModelSpec

if TYPE_CHECKING:
    from episodes.harness.budget import StreamBudget

# What a harness may send in one request (a long conversation, images inline).
MAX_REQUEST_BYTES = 64 * 1024 * 1024

__all__ = ["SESSION_HEADER", "ModelProxy", "openai_error", "read_upstream_key"]


class ModelProxy:
    def __init__(
        self,
        spec: ModelSpec,
        *,
        upstream_key: str | None = None,
        token: str | None = None,
        on_call: Callback | None = None,
        on_failure: Callback | None = None,
        uds_path: str | None = None,
        session_id: str | None = None,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        limits: HarnessLimits | None = None,
        budget: StreamBudget | None = None,
    ) -> None:
        """`upstream_key` defaults to the worker's `spec.api_key_env` (ModelError if unset).

        `token` is the harness's bearer token (default: a fresh random one). `uds_path`
        also serves on that Unix socket (for boxes without a network). `session_id` goes
        upstream as header `X-Session-ID` on every call (sticky routing: a session's
        calls share their prefix, so one replica's cache serves them all).

        `limits` bound what the harness may make the endpoint hold (connections, request
        bytes, idle and slow requests; `harness.limits`); a request's head is judged
        against `budget` (the session's, `turn_request_bytes`) before its body is read,
        and the body charged to it once read whole.
        """
        self.spec = spec
        self._key = upstream_key if upstream_key is not None else read_upstream_key(spec)
        self.token = token or secrets.token_urlsafe(32)
        self.on_call = on_call
        self.on_failure = on_failure
        self.uds_path = uds_path
        self.session_id = session_id
        self.failure: ModelError | None = None
        self.calls = 0  # finished calls handed to on_call
        self.port: int | None = None
        # What each call's record extends (see episodes/model/conversation.py).
        self.conversations = Conversations()
        self._server: HttpServer | None = None
        self._sender = Sender(spec, self._key, session_id, backoff_s, max_backoff_s)
        self._stop_task: asyncio.Future[None] | None = None
        self._forced = spec.enforced()  # over the harness's values, on every call
        self.limits = limits or (budget.limits if budget is not None else HarnessLimits())
        self._budget = budget
        # Set while a restored session replays recorded turns (episodes/replay.py).
        self.replay: Replay | None = None

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("the model proxy is not started")
        return f"http://127.0.0.1:{self.port}/v1"

    def env(self) -> dict[str, str]:
        """What the harness needs (the OpenAI SDKs read these two variables)."""
        return {"OPENAI_BASE_URL": self.base_url, "OPENAI_API_KEY": self.token}

    async def start(self) -> None:
        if self._stop_task is not None:
            raise RuntimeError("the model proxy was stopped; make a new one")
        if self._server is not None:
            return
        await self._sender.start()
        limits = self.limits
        bounds = Bounds(
            max_body=min(MAX_REQUEST_BYTES, limits.request_bytes),
            connections=limits.connections,
            held_bytes=limits.request_bytes,
            idle_s=limits.idle_timeout_s,
            request_s=limits.request_timeout_s,
        )
        self._server = HttpServer(self._handle, bounds=bounds, admit=self._admit)
        sock = tcp_listener()
        self.port = sock.getsockname()[1]
        await self._server.listen_tcp(sock)
        if self.uds_path is not None:
            await self._server.listen_unix(self.uds_path)

    async def stop(self) -> None:
        """Close the endpoint (connections are refused after) and the upstream client.

        Idempotent, and finished even if the caller is cancelled meanwhile.
        """
        if self._stop_task is None:
            self._stop_task = asyncio.ensure_future(self._cleanup())
        await finish(self._stop_task)

    async def _cleanup(self) -> None:
        if self._server is not None:
            await self._server.close(timeout=1.0)
        await self._sender.close()

    async def __aenter__(self) -> ModelProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- requests ------------------------------------------------------------------------

    def _admit(self, method: str, path: str, headers: dict[str, str]) -> None:
        """A request's head, before its body is read: the token, then the budget."""
        given = headers.get("authorization", "")
        scheme, _, value = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            value.strip().encode(), self.token.encode()
        ):
            raise Refusal(401, "invalid or missing session token")
        length = headers.get("content-length")
        if self._budget is not None and length is not None:
            # Digits only (the parser took nothing else). Judged, not charged: a request
            # the server then refuses (413, 429) or that never arrives whole is not the
            # turn's; its body is charged once read (`_handle`).
            refused = self._budget.judge_request(int(length))
            if refused is not None:
                raise Refusal(*refused)

    async def _handle(self, request: Request) -> None:
        if self._budget is not None:
            # Accepted: the whole body is here (within `request_bytes` meanwhile).
            why = self._budget.charge_request(len(request.body))
            if why is not None:
                return _json(request, 429, openai_error(why, "invalid_request_error", "429"))
        route = (request.method, request.path.rstrip("/"))
        if route == ("POST", "/v1/chat/completions"):
            return await self._chat(request)
        if route == ("GET", "/v1/models"):
            model = {"id": self.spec.model, "object": "model", "created": 0, "owned_by": "episodes"}
            return _json(request, 200, {"object": "list", "data": [model]})
        known = route[1] in ("/v1/chat/completions", "/v1/models")
        status, why = (405, "method not allowed") if known else (404, "not found")
        _json(request, status, openai_error(why, "invalid_request_error", str(status)))

    async def _chat(self, request: Request) -> None:
        raw = request.body
        if text_too_deep(raw):
            # Refused before parsing (json.loads recurses per level) and never forwarded.
            msg = openai_error(too_deep_message("the request body"), "invalid_request_error")
            return _json(request, 400, msg)
        try:
            body = loads(raw)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            msg = openai_error("the request body must be a JSON object", "invalid_request_error")
            return _json(request, 400, msg)
        sent = {**body, **self._forced}
        started = time.monotonic()
        if sent.get("stream"):
            # Usage arrives in a last chunk only when asked for; the record needs it.
            sent["stream_options"] = {**(sent.get("stream_options") or {}), "include_usage": True}
        if self.replay is not None:
            try:
                answer = self.replay.model(sent)
            except Divergence as e:  # on_divergence: fail; the restore fails on it
                return _json(request, 409, openai_error(str(e), "invalid_request_error"))
            if answer is not None:
                return answer.send(request)
        if sent.get("stream"):
            return await self._streamed(request, sent, started)
        return await self._plain(request, sent, started)

    async def _plain(self, request: Request, sent: dict[str, Any], started: float) -> None:
        try:
            call = await self._sender.send(sent, read=True)
        except Exhausted as e:
            return await self._fail(request, sent, started, str(e), e.served_by)
        resp, raw = call.resp, call.raw
        if text_too_deep(raw):
            # Neither parsed nor recorded nor passed on: the call failed (`model_error`).
            why = too_deep_message("the upstream's answer")
            failed = f"model call failed: {why}"
            return await self._fail(request, sent, started, failed, call.replica)
        ctype = resp.headers.get("content-type", "application/json")
        try:
            answer = loads(raw)
        except ValueError:
            answer = raw.decode("utf-8", "replace")
        error = None if resp.status < 300 else one_line(error_text(raw))
        await self._record(
            sent,
            answer,
            started,
            call.attempts,
            call.replica,
            stream=False,
            status=resp.status,
            headers=resp.headers,
            error=error,
            raw=raw_to_record(raw, answer, stream=False),
        )
        request.respond(resp.status, raw, ctype)

    async def _streamed(self, request: Request, sent: dict[str, Any], started: float) -> None:
        try:
            call = await self._sender.send(sent, read=False)
        except Exhausted as e:
            return await self._fail(request, sent, started, str(e), e.served_by)
        resp = call.resp
        if resp.status >= 300:  # a 4xx the harness caused (read by `send`): pass it through
            raw = call.raw
            await self._record(
                sent, error_text(raw), started, call.attempts, call.replica,
                stream=True, status=resp.status, headers=resp.headers,
            )  # fmt: skip
            ctype = resp.headers.get("content-type", "application/json")
            return request.respond(resp.status, raw, ctype)
        request.start_stream()
        # Bytes pass through as they come, written to the harness's socket from the
        # upstream socket's read callback; parsed once, when the stream ends.
        received: list[bytes] = []
        broke: str | None = None
        gone = request.gone  # the harness hung up; nothing left to tell it
        slow = False  # it read too slowly: cut off

        def passed(data: bytes) -> None:
            received.append(data)
            try:
                if request.send(data):
                    return
            except ConnectionError:
                return hung_up()
            # The harness reads slowly: so does the proxy, upstream.
            resp.pause()
            request.on_writable(lambda: hung_up() if request.gone else resp.resume())

        def hung_up() -> None:  # the harness hung up: read no more
            nonlocal gone
            gone = True
            resp.stop()

        try:
            # The harness's side (the writes) is told apart from the upstream's here.
            if not gone:
                await resp.forward(passed, self.spec.timeout_s)
        except SlowReader:
            # The harness's doing, not the model's: its stream is cut, its call recorded.
            gone, slow = True, True
            request.close()
        except TimeoutError:
            broke = "model stream broke: upstream ReadTimeout"
        except UpstreamError as e:
            broke = f"model stream broke: upstream {e.kind}"
        finally:
            request.on_writable(None)
            resp.close()
            # fleet.py: a stream the upstream broke is the replica's failure, not a success
            call.ended(broke=broke is not None)
            call.release()  # its place under the limit
        whole = b"".join(received)
        received.clear()
        chunks, too_deep = stream_chunks(whole)
        if too_deep and broke is None:
            # Already passed on; not parsed (recursion) nor recorded: the call failed.
            broke = f"model stream broke: {too_deep_message('a chunk of the upstream stream')}"
        response = assemble(chunks)
        if broke is not None:
            err = ModelError(self._sender.scrub(broke))
            with contextlib.suppress(ConnectionError):
                event = json.dumps(openai_error(str(err), "upstream_error", "model_error"))
                request.send(f"data: {event}\n\n".encode())
            await self._report(err)
        await self._record(
            sent,
            response,
            started,
            call.attempts,
            call.replica,
            stream=True,
            headers=resp.headers,
            error=str(broke) if broke else harness_error(gone, slow, self.spec.timeout_s),
            raw=raw_to_record(whole, response, stream=True) if self.spec.replay_bytes else None,
        )
        request.end()

    # -- upstream ------------------------------------------------------------------------

    async def _report(self, err: ModelError) -> None:
        if self.failure is None:
            self.failure = err
        await notify(self.on_failure, err)

    async def _fail(
        self,
        request: Request,
        sent: dict[str, Any],
        started: float,
        message: str,
        replica: Replica | None,
    ) -> None:
        err = ModelError(message)
        await self._report(err)
        await self._record(
            sent,
            None,
            started,
            self.spec.retries + 1,
            replica,
            stream=bool(sent.get("stream")),
            status=502,
            error=message,
        )
        _json(request, 502, openai_error(message, "upstream_error", "model_error"))

    async def _record(
        self,
        sent: dict[str, Any],
        response: Any,
        started: float,
        attempts: int,
        replica: Replica | None,
        *,
        stream: bool,
        status: int = 200,
        error: str | None = None,
        raw: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Record a finished call: `replica` served it (its last attempt's), `headers`
        are its answer's (None: no answer came)."""
        served_by = None if replica is None else replica.name
        version = None if replica is None else replica.policy_version
        record = call_record(
            self.conversations, self.spec, served_by, sent, response, started, attempts,
            stream=stream, status=status, error=error, raw=raw,
            headers=headers, replica_version=version,
        )  # fmt: skip
        self.calls += 1
        await notify(self.on_call, record)


def _json(request: Request, status: int, value: Any) -> None:
    request.respond(status, json.dumps(value).encode())
