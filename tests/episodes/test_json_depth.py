"""`text_too_deep` (episodes/json_depth.py): the usual text (no bracket in a string) is
answered from its brackets alone, and every answer is `text_depth`'s."""

from __future__ import annotations

import json
import random
import subprocess
import sys

from episodes import json_depth
from episodes.json_depth import text_depth, text_too_deep


def _tree(rng: random.Random, depth: int) -> object:
    if depth == 0 or rng.random() < 0.2:
        return rng.choice(["a", 'q"uote', "back\\slash", "[br{ack]ets}", 7, None])
    if rng.random() < 0.5:
        return [_tree(rng, depth - 1) for _ in range(rng.randrange(0, 4))]
    return {f"k{i}": _tree(rng, depth - 1) for i in range(rng.randrange(0, 4))}


def test_text_too_deep_is_text_depth_past_the_limit_on_json_and_on_any_bytes():
    rng = random.Random(7)
    alphabet = ['"', "[", "]", "{", "}", "\\", "a", ","]
    for _ in range(3000):
        texts = [json.dumps(_tree(rng, rng.randrange(1, 10)))]
        texts.append("".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 40))))
        for text in texts:
            for limit in (0, 1, 2, 3, 5, 8):
                want = text_depth(text) > limit
                assert text_too_deep(text, limit) == want, (text, limit)
                assert text_too_deep(text.encode(), limit) == want, (text, limit)


def test_the_usual_text_is_measured_without_cutting_out_its_strings(monkeypatch):
    measured: list[object] = []
    real = json_depth._depth

    def spy(marks: bytes) -> int:
        measured.append(marks)
        return real(marks)

    monkeypatch.setattr(json_depth, "_depth", spy)
    chunk = {"choices": [{"delta": {"content": 'a word, \\"quoted\\"'}, "logprobs": [[1]]}]}
    usual = json.dumps([[[chunk]]] * 50)
    assert not text_too_deep(usual.encode(), 8) and not text_too_deep(usual, 8)
    assert measured == []  # answered from the brackets alone
    deep = "[" * 9 + "]" * 9
    assert text_too_deep(deep, 8) and text_too_deep(deep.encode(), 8)
    brackets_in_a_string = json.dumps([[[["[" * 9]]]] * 3)
    assert not text_too_deep(brackets_in_a_string, 8)
    assert len(measured) == 3  # past the limit, or brackets in strings: measured exactly


def test_the_proxys_json_does_not_import_the_stream_parser():
    """fastjson once took its depth check from stream.py, which imported fastjson back
    on every call: the check lives in json_depth, and nothing cycles."""
    code = "import sys, episodes.model.fastjson; assert 'episodes.model.stream' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
