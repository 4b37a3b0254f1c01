"""A codec server: lets the Temporal UI and CLI show encrypted (and offloaded) payloads.

Protocol (docs.temporal.io/codec-server): `POST /encode` and `POST /decode` (also
under a namespace segment, `/{namespace}/decode`, which the CLI's
`--codec-endpoint 'http://host:port/{namespace}'` produces), each taking and
returning proto3 JSON of `temporal.api.common.v1.Payloads`:
`{"payloads": [{"metadata": {"encoding": "<base64>"}, "data": "<base64>"}]}`.
The UI adds `X-Namespace`, and `Authorization` when configured, so a browser
preflights with OPTIONS; CORS answers only the configured UI origins.

What /decode does, per payload:
  * an external-storage reference is RESOLVED (fetched from the local directory or
    S3, then decrypted) when its stored size is at most `max_resolved_bytes`, so the
    UI shows the content of a long tool result, not a bucket key. Bigger ones stay
    references: a 20 MB model transcript would stall the browser, and the reference
    shows its size. References to drivers this server lacks stay as they are.
  * an encrypted payload is decrypted; anything else passes through unchanged.
/encode only encrypts (what the UI/CLI encode, signal or start inputs, is small):
it never stores externally.

Anyone who can reach this server can decrypt every payload: it listens on loopback
by default and, on any other address, needs an expected `Authorization` value.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import os
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from aiohttp import hdrs, web
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.api.sdk.v1 import ExternalStorageReference
from temporalio.converter import (
    JSONProtoPayloadConverter,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
)

from episodes.errors import CodecServerError
from episodes.payloads.config import PayloadsConfig, payloads_config_from_env
from episodes.payloads.converter import payload_codec, storage_driver

DEFAULT_PORT = 8081
DEFAULT_UI_ORIGIN = "http://localhost:8233"  # the dev server's UI
AUTH_ENV = "EPISODES_CODEC_SERVER_AUTH"
DEFAULT_MAX_RESOLVED_BYTES = 4 * 1024 * 1024
ALLOW_HEADERS = "Content-Type, X-Namespace, Authorization"

_REFERENCE_TYPE = ExternalStorageReference.DESCRIPTOR.full_name.encode()
# The SDK marks codec-encoded references with this (written by later SDK releases).
_REFERENCE_MARKER = "__temporal_external_storage_reference"


class PayloadTranslator:
    """Decode = resolve external references (bounded) + decrypt; encode = encrypt."""

    def __init__(
        self,
        config: PayloadsConfig,
        *,
        environ: Mapping[str, str] | None = None,
        max_resolved_bytes: int = DEFAULT_MAX_RESOLVED_BYTES,
    ):
        self.codec = payload_codec(config, environ)
        self.driver = storage_driver(config)
        self.max_resolved_bytes = max_resolved_bytes
        self._refs = JSONProtoPayloadConverter()

    def _reference(self, payload: Payload) -> ExternalStorageReference | None:
        if not (
            payload.metadata.get("encoding") == b"json/protobuf"
            and payload.metadata.get("messageType") == _REFERENCE_TYPE
        ):
            return None
        ref = self._refs.from_payload(payload, ExternalStorageReference)
        return ref if isinstance(ref, ExternalStorageReference) else None

    async def decode_one(self, payload: Payload) -> Payload:
        if payload.metadata.get(_REFERENCE_MARKER) == b"true" and self.codec is not None:
            inner = Payload()
            inner.CopyFrom(payload)
            del inner.metadata[_REFERENCE_MARKER]
            del inner.external_payloads[:]
            decoded = self.codec.decrypt(inner)
            decoded.external_payloads.extend(payload.external_payloads)
            payload = decoded
        ref = self._reference(payload)
        if ref is None:
            return self.codec.decrypt(payload) if self.codec else payload
        size = sum(e.size_bytes for e in payload.external_payloads)
        if (
            self.driver is None
            or ref.driver_name != self.driver.name()
            or size > self.max_resolved_bytes
        ):
            return payload
        [stored] = await self.driver.retrieve(
            StorageDriverRetrieveContext(), [StorageDriverClaim(dict(ref.claim_data))]
        )
        return self.codec.decrypt(stored) if self.codec else stored

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(await asyncio.gather(*(self.decode_one(p) for p in payloads)))

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.codec.encrypt(p) for p in payloads] if self.codec else list(payloads)

    async def aclose(self) -> None:
        close = getattr(self.driver, "aclose", None)
        if close is not None:
            await close()


def codec_app(
    translator: PayloadTranslator,
    *,
    ui_origins: Sequence[str] = (DEFAULT_UI_ORIGIN,),
    auth: str | None = None,
) -> web.Application:
    origins = {o.rstrip("/") for o in ui_origins}

    def cors(request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
        origin = request.headers.get(hdrs.ORIGIN)
        if origin and origin.rstrip("/") in origins:
            response.headers[hdrs.ACCESS_CONTROL_ALLOW_ORIGIN] = origin
            response.headers[hdrs.ACCESS_CONTROL_ALLOW_METHODS] = "POST, OPTIONS"
            response.headers[hdrs.ACCESS_CONTROL_ALLOW_HEADERS] = ALLOW_HEADERS
            # The UI sends cookies/tokens with "include cross-origin credentials".
            response.headers[hdrs.ACCESS_CONTROL_ALLOW_CREDENTIALS] = "true"
            response.headers[hdrs.ACCESS_CONTROL_MAX_AGE] = "600"
        response.headers[hdrs.VARY] = "Origin"
        return response

    def authorized(request: web.Request) -> bool:
        if auth is None:
            return True
        given = request.headers.get(hdrs.AUTHORIZATION, "")
        return hmac.compare_digest(given.encode(), auth.encode())

    async def preflight(request: web.Request) -> web.StreamResponse:
        # Browsers send no Authorization on a preflight: never demand it here.
        return cors(request, web.Response(status=204))

    def handler(op: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handle(request: web.Request) -> web.StreamResponse:
            if not authorized(request):
                return cors(request, web.json_response({"error": "unauthorized"}, status=401))
            try:
                body = Payloads()
                json_format.Parse(await request.text(), body)
            except json_format.ParseError as e:
                msg = f"body is not JSON Payloads: {str(e).splitlines()[0][:200]}"
                return cors(request, web.json_response({"error": msg}, status=400))
            try:
                if op == "decode":
                    out = await translator.decode(body.payloads)
                else:
                    out = await translator.encode(body.payloads)
            except Exception as e:  # our errors name the key id or digest, never a key
                msg = f"{op} failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}"
                return cors(request, web.json_response({"error": msg}, status=400))
            text = json_format.MessageToJson(Payloads(payloads=out), indent=None)
            return cors(request, web.Response(text=text, content_type="application/json"))

        return handle

    # Inline payloads reach 2 MB (base64: ~2.7 MB); leave room for a batch of them.
    app = web.Application(client_max_size=64 * 1024 * 1024)
    for prefix in ("", "/{namespace}"):
        for op in ("encode", "decode"):
            app.router.add_post(f"{prefix}/{op}", handler(op))
            app.router.add_route("OPTIONS", f"{prefix}/{op}", preflight)

    async def close_translator(_: web.Application) -> None:
        await translator.aclose()

    app.on_cleanup.append(close_translator)
    return app


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class RunningCodecServer:
    runner: web.AppRunner
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def aclose(self) -> None:
        await self.runner.cleanup()


async def start_codec_server(
    config: PayloadsConfig,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    ui_origin: str | Sequence[str] = DEFAULT_UI_ORIGIN,
    auth: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    max_resolved_bytes: int = DEFAULT_MAX_RESOLVED_BYTES,
) -> RunningCodecServer:
    """Start listening (port 0: any free port) and return; `aclose()` stops it."""
    if auth is None and not _is_loopback(host):
        raise CodecServerError(
            f"the codec server decrypts every payload: on {host} it needs an expected "
            f"Authorization value ({AUTH_ENV})"
        )
    origins = [ui_origin] if isinstance(ui_origin, str) else list(ui_origin)
    translator = PayloadTranslator(config, environ=environ, max_resolved_bytes=max_resolved_bytes)
    runner = web.AppRunner(codec_app(translator, ui_origins=origins, auth=auth))
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as e:
        await runner.cleanup()
        raise CodecServerError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    bound = runner.addresses[0][1] if runner.addresses else port
    return RunningCodecServer(runner, host, bound)


async def serve_codec_server(
    config: PayloadsConfig,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    ui_origin: str | Sequence[str] = DEFAULT_UI_ORIGIN,
    auth: str | None = None,
) -> None:
    """Serve until cancelled."""
    server = await start_codec_server(config, host, port, ui_origin, auth)
    origins = ui_origin if isinstance(ui_origin, str) else ", ".join(ui_origin)
    print(
        f"codec server on {server.url} (UI origin {origins}; auth {'required' if auth else 'off'})",
        file=sys.stderr,
        flush=True,
    )
    try:
        await asyncio.Event().wait()
    finally:
        await server.aclose()


def codec_server_command(
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    ui_origin: str = DEFAULT_UI_ORIGIN,
    auth_env: str = AUTH_ENV,
    config: PayloadsConfig | None = None,
) -> None:
    """For `episodes codec-server`: `config` (default: EPISODES_* variables), auth from
    `auth_env`.

    Raises PayloadsConfigError / CodecServerError (EpisodesError) with one-line messages.
    """
    config = config or payloads_config_from_env()
    auth = os.environ.get(auth_env) or None
    try:
        asyncio.run(serve_codec_server(config, host, port, ui_origin, auth))
    except KeyboardInterrupt:
        pass
