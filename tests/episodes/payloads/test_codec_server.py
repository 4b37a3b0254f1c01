"""The codec server over real HTTP: the UI/CLI wire format, external references, CORS, auth."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.contrib.pydantic import pydantic_data_converter

from episodes.errors import CodecServerError
from episodes.payloads import AesGcmEncryption, LocalStorage, PayloadsConfig, data_converter
from episodes.payloads.codec import ENCODING
from episodes.payloads.codec_server import start_codec_server

UI = "http://localhost:8233"
TOKEN = "Bearer test-token"
KEYS = {"KEYS": "k1:" + base64.b64encode(b"C" * 32).decode()}
SECRET = "PLAINTEXT-MARKER-ui"


def config(tmp_path: Path) -> PayloadsConfig:
    return PayloadsConfig(
        storage=LocalStorage(path=tmp_path / "payloads", threshold_bytes=1024),
        encryption=AesGcmEncryption(keys_env="KEYS"),
    )


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[str]:
    running = await start_codec_server(
        config(tmp_path), "127.0.0.1", 0, UI, TOKEN, environ=KEYS, max_resolved_bytes=64 * 1024
    )
    yield running.url
    await running.aclose()


def body(payloads: list[Payload]) -> str:
    return json_format.MessageToJson(Payloads(payloads=payloads))


def parse(text: str) -> list[Payload]:
    out = Payloads()
    json_format.Parse(text, out)
    return list(out.payloads)


def plain(value: object) -> Payload:
    return pydantic_data_converter.payload_converter.to_payloads([value])[0]


async def post(url: str, data: str, *, auth: str | None = TOKEN, **headers: str):  # type: ignore[no-untyped-def]
    hdrs = {"Content-Type": "application/json", "X-Namespace": "default", **headers}
    if auth is not None:
        hdrs["Authorization"] = auth
    async with aiohttp.ClientSession() as s, s.post(url, data=data, headers=hdrs) as r:
        return r.status, await r.text(), dict(r.headers)


async def test_encode_then_decode_round_trip_in_the_wire_format(server: str) -> None:
    original = [plain({"turn": 1, "reply": SECRET}), plain("hello")]
    status, text, _ = await post(f"{server}/encode", body(original))
    assert status == 200
    wire = json.loads(text)
    # proto3 JSON: bytes are base64, so "encoding" is base64 of binary/encrypted.
    assert base64.b64decode(wire["payloads"][0]["metadata"]["encoding"]) == ENCODING
    assert SECRET not in text and base64.b64encode(SECRET.encode()).decode() not in text
    # The CLI's --codec-endpoint 'http://host:port/{namespace}' form.
    status, text, _ = await post(f"{server}/default/decode", text)
    assert status == 200
    assert parse(text) == original


async def test_decode_resolves_small_references_and_keeps_big_ones(
    server: str, tmp_path: Path
) -> None:
    dc = data_converter(config(tmp_path), environ=KEYS)
    small_ref_value = SECRET + " " + "x" * 4000  # over the 1 KiB threshold, under 64 KiB
    big_ref_value = "y" * 200_000  # over the server's 64 KiB resolve cap
    history = await dc.encode([small_ref_value, big_ref_value, "inline"])
    status, text, _ = await post(f"{server}/decode", body(history))
    assert status == 200, text
    resolved, kept, inline = parse(text)
    assert resolved == plain(small_ref_value)
    assert kept == history[1]  # still the reference: the UI shows its size, not 200 KB
    assert inline == plain("inline")


async def test_cors_preflight_answers_the_ui_origin_only(server: str) -> None:
    request_headers = {
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type,x-namespace,authorization",
    }
    async with aiohttp.ClientSession() as s:
        # No Authorization on a preflight (browsers never send it), and still allowed.
        async with s.options(f"{server}/decode", headers={"Origin": UI, **request_headers}) as r:
            assert r.status == 204
            assert r.headers["Access-Control-Allow-Origin"] == UI
            allowed = {
                h.strip().lower() for h in r.headers["Access-Control-Allow-Headers"].split(",")
            }
            assert {"content-type", "x-namespace", "authorization"} <= allowed
            assert "POST" in r.headers["Access-Control-Allow-Methods"]
        async with s.options(
            f"{server}/decode", headers={"Origin": "http://evil.example", **request_headers}
        ) as r:
            assert "Access-Control-Allow-Origin" not in r.headers
    status, _, headers = await post(f"{server}/decode", body([]), Origin=UI)
    assert status == 200 and headers["Access-Control-Allow-Origin"] == UI


async def test_auth_mismatch_is_401(server: str) -> None:
    encoded = body([plain("x")])
    for auth in (None, "Bearer wrong", TOKEN + "x"):
        status, text, headers = await post(f"{server}/decode", encoded, auth=auth, Origin=UI)
        assert status == 401, auth
        assert json.loads(text) == {"error": "unauthorized"}
        assert headers["Access-Control-Allow-Origin"] == UI  # so the UI can show why
    status, _, _ = await post(f"{server}/decode", encoded)
    assert status == 200


async def test_bad_bodies_and_unknown_keys_are_400_with_a_reason(
    server: str, tmp_path: Path
) -> None:
    status, text, _ = await post(f"{server}/decode", "not json")
    assert status == 400 and "not JSON Payloads" in json.loads(text)["error"]
    other_keys = {"KEYS": "old:" + base64.b64encode(b"O" * 32).decode()}
    foreign = await data_converter(
        PayloadsConfig(encryption=AesGcmEncryption(keys_env="KEYS")), environ=other_keys
    ).encode(["sealed with a retired key"])
    status, text, _ = await post(f"{server}/decode", body(foreign))
    assert status == 400
    error = json.loads(text)["error"]
    assert "key id 'old'" in error and base64.b64encode(b"O" * 32).decode() not in error


async def test_no_auth_only_on_loopback(tmp_path: Path) -> None:
    with pytest.raises(CodecServerError, match="needs an expected Authorization"):
        await start_codec_server(config(tmp_path), "0.0.0.0", 0, UI, None, environ=KEYS)
    running = await start_codec_server(config(tmp_path), "127.0.0.1", 0, UI, None, environ=KEYS)
    try:
        status, _, _ = await post(f"{running.url}/decode", body([plain(1)]), auth=None)
        assert status == 200
    finally:
        await running.aclose()
