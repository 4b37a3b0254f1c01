"""The wire protocol: framing, incremental decoding, validation, bounded memory."""

from __future__ import annotations

import asyncio
import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from episodes.errors import ProtocolError
from episodes.harness import sdk
from episodes.harness.protocol import (
    HEADER,
    PacketDecoder,
    encode,
    read_packet,
    validate_host_packet,
)

PACKETS = [
    {"type": "ready"},
    {"type": "event", "turn": 1, "event": {"progress": 0.5, "text": "héllo ✓"}},
    {"type": "reply", "turn": 1, "message": [1, "two", None, {"three": 3.0}]},
    {"type": "error", "turn": 2, "error": "it broke"},
    {"type": "reply", "turn": 3, "message": None, "extra": "ignored"},
]


def frame(body: bytes) -> bytes:
    return struct.pack(">Q", len(body)) + body


def test_encode_is_length_prefixed_compact_utf8_json():
    data = encode({"type": "ready"})
    assert data == b"\x00\x00\x00\x00\x00\x00\x00\x10" + b'{"type":"ready"}'
    body = encode({"type": "reply", "turn": 1, "message": "é"})[8:]
    assert body.decode("utf-8") == '{"type":"reply","turn":1,"message":"é"}'


def test_encode_rejects_what_is_not_a_json_object():
    with pytest.raises(TypeError):
        encode(["not", "an", "object"])  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        encode({"type": "reply", "turn": 1, "message": float("nan")})
    with pytest.raises(TypeError):
        encode({"type": "reply", "turn": 1, "message": object()})


def test_round_trip_and_sdk_agree():
    stream = b"".join(encode(p) for p in PACKETS)
    assert PacketDecoder().feed(stream) == PACKETS
    # The SDK (the harness side) frames byte-for-byte the same way.
    assert b"".join(sdk.encode(p) for p in PACKETS) == stream


def test_split_at_every_byte_boundary():
    stream = b"".join(encode(p) for p in PACKETS)
    for cut in range(len(stream) + 1):
        decoder = PacketDecoder()
        got = decoder.feed(stream[:cut]) + decoder.feed(stream[cut:])
        assert got == PACKETS, cut
        assert decoder.buffered == 0


def test_byte_by_byte():
    decoder = PacketDecoder()
    got = []
    for b in b"".join(encode(p) for p in PACKETS):
        got += decoder.feed(bytes([b]))
    assert got == PACKETS


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (frame(b"\xff\xfe{}"), "not valid UTF-8"),
        (frame(b"{not json"), "not JSON"),
        (frame(b""), "not JSON"),
        (frame(b"[1, 2]"), "must be a JSON object, got list"),
        (frame(b"42"), "must be a JSON object, got int"),
        (frame(b'"ready"'), "must be a JSON object, got str"),
        (frame(b'{"type": "reply", "turn": 1, "message": NaN}'), "not JSON"),
        (frame(b'{"turn": 1}'), "no string 'type'"),
        (frame(b'{"type": 7}'), "no string 'type'"),
        (frame(b'{"type": "bogus"}'), "unknown packet type 'bogus'"),
        (frame(b'{"type": "turn", "turn": 1, "message": 1}'), "unknown packet type 'turn'"),
        (frame(b'{"type": "reply", "turn": 1}'), "missing field(s): message"),
        (frame(b'{"type": "event", "event": 1}'), "missing field(s): turn"),
        (frame(b'{"type": "error", "turn": 1}'), "missing field(s): error"),
        (frame(b'{"type": "error", "turn": 1, "error": 5}'), "must be a string"),
        (frame(b'{"type": "reply", "turn": "1", "message": 1}'), "bad turn index"),
        (frame(b'{"type": "reply", "turn": true, "message": 1}'), "bad turn index"),
        (frame(b'{"type": "reply", "turn": -1, "message": 1}'), "bad turn index"),
    ],
)
def test_malformed_packets_raise_protocol_error(raw, needle):
    with pytest.raises(ProtocolError) as info:
        PacketDecoder().feed(raw)
    assert needle in str(info.value)
    assert info.value.error_type == "protocol_error"


def test_host_packets_validate_separately():
    assert validate_host_packet({"type": "turn", "turn": 0, "message": None})
    assert validate_host_packet({"type": "shutdown"})
    with pytest.raises(ProtocolError, match="unknown packet type 'reply' from the host"):
        validate_host_packet({"type": "reply", "turn": 1, "message": 1})
    raw = PacketDecoder(validate=None).feed(encode({"type": "anything", "x": 1}))
    assert raw == [{"type": "anything", "x": 1}]


def test_oversize_is_rejected_from_the_header_alone():
    decoder = PacketDecoder(max_packet_bytes=1024)
    with pytest.raises(ProtocolError, match=f"packet of {2**60} bytes exceeds the maximum of 1024"):
        decoder.feed(HEADER.pack(2**60))
    assert decoder.buffered == 0 and decoder.failed
    # A broken stream buffers nothing more, however much arrives.
    with pytest.raises(ProtocolError):
        decoder.feed(b"x" * 1_000_000)
    assert decoder.buffered == 0


def test_exact_max_is_accepted_and_one_more_is_not():
    body = json.dumps({"type": "reply", "turn": 1, "message": "x" * 100}).encode()
    assert PacketDecoder(max_packet_bytes=len(body)).feed(frame(body))
    with pytest.raises(ProtocolError, match="exceeds the maximum"):
        PacketDecoder(max_packet_bytes=len(body) - 1).feed(frame(body)[:8])


def test_text_on_stdout_gets_a_hint():
    with pytest.raises(ProtocolError, match="is the harness printing to stdout"):
        PacketDecoder().feed(b"Loading model weights...\n")


def test_good_packets_before_garbage_are_delivered_first():
    decoder = PacketDecoder()
    assert decoder.feed(encode(PACKETS[0]) + b"garbage!garbage!") == [PACKETS[0]]
    with pytest.raises(ProtocolError):
        decoder.feed(b"")


class ChunkStream:
    """A ByteStream over fixed chunks; records the largest read it was asked for."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = list(chunks)
        self.largest_read = 0

    async def read(self, n: int = -1) -> bytes:
        self.largest_read = max(self.largest_read, n)
        await asyncio.sleep(0)
        return self.chunks.pop(0) if self.chunks else b""


async def test_read_packet_stream_then_clean_eof():
    stream_bytes = b"".join(encode(p) for p in PACKETS)
    stream = ChunkStream([stream_bytes[i : i + 7] for i in range(0, len(stream_bytes), 7)])
    decoder = PacketDecoder()
    got = []
    while (packet := await read_packet(stream, decoder)) is not None:
        got.append(packet)
    assert got == PACKETS
    assert stream.largest_read == 64 * 1024


@pytest.mark.parametrize("cut", [3, 8, 12])
async def test_read_packet_short_read_is_an_error(cut):
    stream = ChunkStream([encode(PACKETS[1])[:cut]])
    with pytest.raises(ProtocolError, match="short read"):
        await read_packet(stream, PacketDecoder())


async def test_read_packet_rejects_oversize_before_reading_the_body():
    stream = ChunkStream([HEADER.pack(2**60), *([b"x" * 65536] * 1000)])
    with pytest.raises(ProtocolError, match="exceeds the maximum"):
        await read_packet(stream, PacketDecoder())
    assert len(stream.chunks) == 1000  # not one byte of the "body" was read


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=10,
)
harness_packets = st.one_of(
    st.just({"type": "ready"}),
    st.builds(
        lambda t, e: {"type": "event", "turn": t, "event": e}, st.integers(0, 10**6), json_values
    ),
    st.builds(
        lambda t, m: {"type": "reply", "turn": t, "message": m}, st.integers(0, 10**6), json_values
    ),
    st.builds(
        lambda t, e: {"type": "error", "turn": t, "error": e}, st.integers(0, 10**6), st.text()
    ),
)


@settings(max_examples=200, deadline=None)
@given(packets=st.lists(harness_packets, max_size=8), data=st.data())
def test_any_chunking_yields_exactly_the_packets(packets, data):
    stream = b"".join(encode(p) for p in packets)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    decoder = PacketDecoder()
    got = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        got += decoder.feed(stream[start:end])
    assert got == packets
    assert decoder.buffered == 0


# -- nesting depth (issue 19) ----------------------------------------------------------


def _nested(depth: int, open_: bytes = b"[", close: bytes = b"]") -> bytes:
    return open_ * depth + close * depth


@pytest.mark.parametrize("depth", [129, 5000, 1_000_000])
def test_a_packet_nested_past_the_limit_is_a_protocol_error(depth):
    body = b'{"type":"reply","turn":1,"message":' + _nested(depth - 1) + b"}"
    with pytest.raises(ProtocolError) as info:
        PacketDecoder().feed(frame(body))
    assert "deeper than 128 levels" in str(info.value) and "\n" not in str(info.value)


def test_a_packet_at_the_depth_limit_is_accepted():
    nested_objects = b'{"a":' * 126 + b"1" + b"}" * 126
    body = b'{"type":"event","turn":1,"event":[' + nested_objects + b"]}"
    [packet] = PacketDecoder().feed(frame(body))
    assert packet["type"] == "event"


def test_brackets_inside_strings_are_not_nesting():
    text = json.dumps({"type": "reply", "turn": 1, "message": '[{"\\' * 10_000}).encode()
    [packet] = PacketDecoder().feed(frame(text))
    assert packet["message"].startswith('[{"\\')


def _depth(value) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


tricky_text = st.text(alphabet='[]{}"\\ab\n\u00e9', max_size=8)
nested_values = st.recursive(
    st.none() | st.integers() | tricky_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(tricky_text, inner, max_size=3),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(value=nested_values, ascii_only=st.booleans())
def test_the_depth_scan_agrees_with_the_parsed_value(value, ascii_only):
    from episodes.json_depth import text_depth, value_too_deep

    text = json.dumps(value, ensure_ascii=ascii_only)
    assert text_depth(text) == text_depth(text.encode()) == _depth(value)
    assert value_too_deep(value, _depth(value) - 1) == (_depth(value) > 0)
    assert not value_too_deep(value, _depth(value))
