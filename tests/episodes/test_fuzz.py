"""Bounded fuzzing of the two parsers that take untrusted input: only documented errors.

The frame decoder reads whatever a harness writes to stdout; the spec loader reads
whatever a user writes in a file. Neither may fail with anything but its own error
type (ProtocolError, SpecError), whatever the bytes.
"""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from episodes.errors import ProtocolError, SpecError
from episodes.harness.protocol import HEADER, PacketDecoder
from episodes.specfile import load_spec
from episodes.types.spec import parse_spec

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)


@FUZZ
@given(st.binary(max_size=512), st.integers(min_value=1, max_value=64))
def test_decoder_on_random_bytes_raises_only_protocol_error(data, chunk):
    decoder = PacketDecoder(max_packet_bytes=256)
    try:
        for i in range(0, len(data), chunk):
            for packet in decoder.feed(data[i : i + chunk]):
                assert isinstance(packet, dict) and isinstance(packet.get("type"), str)
    except ProtocolError:
        pass


@FUZZ
@given(json_values)
def test_decoder_on_framed_json_raises_only_protocol_error(value):
    body = json.dumps(value).encode()
    decoder = PacketDecoder(max_packet_bytes=1 << 20)
    try:
        list(decoder.feed(HEADER.pack(len(body)) + body))
    except ProtocolError:
        pass


spec_like = st.fixed_dictionaries(
    {},
    optional={
        "name": json_values,
        "env": st.sampled_from(["script", "guess-number", "nope", "a:B"]) | json_values,
        "tasks": st.lists(
            st.fixed_dictionaries({"id": json_values}, optional={"data": json_values}), max_size=3
        )
        | json_values,
        "max_turns": json_values,
        "samples": json_values,
        "harness": st.fixed_dictionaries(
            {},
            optional={
                "command": json_values | st.text(max_size=20),
                "runtime": json_values,
                "env": json_values,
            },
        )
        | json_values,
        "reuse_key": json_values,
        "pool": json_values,
    },
)


@FUZZ
@given(spec_like | json_values)
def test_spec_parser_raises_only_spec_error(data):
    try:
        parse_spec(data, source="fuzz.yaml")
    except SpecError as e:
        assert str(e).startswith("fuzz.yaml")


@FUZZ
@given(st.text(max_size=300))
def test_spec_files_raise_only_spec_error(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("fuzz") / "spec.yaml"
    path.write_text(text)
    try:
        load_spec(path)
    except SpecError as e:
        assert "\n" not in str(e).strip() or str(e).startswith(str(path))
