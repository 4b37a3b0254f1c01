"""The upstream connection's body framing (episodes/model/wire.py): chunked bodies cut
at any byte, one whole chunk per read (the fast path), malformed and extra bytes."""

from __future__ import annotations

import pytest

from episodes.model.wire import Dechunker, Framing


def _chunked(*parts: bytes, trailer: bytes = b"") -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n" + trailer + b"\r\n"


PARTS = (b"data: 1\n\n", b"x" * 300, b"\r\n\r\n", b"0\r\n\r\n", b"data: last\n\n")


@pytest.mark.parametrize("step", [1, 2, 3, 7, 16, 64, 10_000])
def test_a_chunked_body_cut_anywhere_gives_the_same_bytes(step):
    raw = _chunked(*PARTS, trailer=b"X-T: 1\r\n")
    d = Dechunker()
    out = b"".join(d.feed(raw[i : i + step]) for i in range(0, len(raw), step))
    assert out == b"".join(PARTS) and d.done and not d.extra


def test_one_whole_chunk_per_read_and_what_follows_the_end():
    d = Dechunker()
    assert [d.feed(b"%x\r\n%s\r\n" % (len(p), p)) for p in PARTS] == list(PARTS)
    assert d.feed(b"0\r\n\r\nHTTP/1.1 200") == b"" and d.done and d.extra


@pytest.mark.parametrize(
    "raw",
    [
        b"zz\r\nab\r\n",
        b"2\r\nabc\r\n",
        b"-2\r\nab\r\n",
        b"2;x\r\nabXY",
        b"1" * 2000,
        # int(x, 16) takes these; a chunk size is hex digits only (issue 28).
        b"0x2\r\nab\r\n",
        b"-0\r\n\r\n",
        b"+2\r\nab\r\n",
        b"2_0\r\n" + b"a" * 32 + b"\r\n",
        b" 2\r\nab\r\n",
    ],
)
def test_malformed_chunks_are_errors(raw):
    with pytest.raises(ValueError):
        Dechunker().feed(raw)


def test_content_length_takes_its_bytes_and_notes_more():
    f = Framing(200, {"content-length": "5"})
    assert f.feed(b"abc") == b"abc" and not f.done
    assert f.feed(b"deXX") == b"de" and f.done and f.extra
    assert Framing(204, {}).done and Framing(200, {"content-length": "0"}).done
    assert Framing(200, {}).until_close
    for bad in ("-1", "+5", "\u00b2", " 5", "5_0", "0x5"):
        with pytest.raises(ValueError):
            Framing(200, {"content-length": bad})
