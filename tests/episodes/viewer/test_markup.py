"""The viewer's first views (episodes/viewer/pages.py, markup.py) as a reader sees them:
counts with the right noun, one duration per episode, compact JSON, and a histogram
of equal values drawn as one centred bar. static/common.js and episode.js are the
script's twins of these functions (the Chromium test in test_viewer.py runs them)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

import episodes.viewer
from episodes.viewer.markup import _bars, _num, _text, pretty_json
from episodes.viewer.pages import _episode, duration_of
from episodes.viewer.stats import histogram
from episodes.words import plural

STATIC = Path(episodes.viewer.__file__).parent / "static"


def test_a_count_takes_the_noun_its_number_needs() -> None:
    assert plural(1, "batch") == "1 batch"
    assert plural(2, "batch") == "2 batches"
    assert plural(0, "episode") == "0 episodes"
    assert plural(1, "episode") == "1 episode"
    assert plural(3, "call") == "3 calls"


def _episode_data(**result: Any) -> dict[str, Any]:
    return {
        "episode": {
            "termination": "env_done",
            "side": "agent",
            "reward": 1.0,
            "turns": 1,
            "duration_s": 1.20,
            "batch": "b",
            "task": "t",
            "sample": 0,
        },
        "result": {
            "termination": "env_done",
            "reward": 1.0,
            "duration_s": 1.14,
            "error": {"message": None},
            **result,
        },
        "undecodable": [],
        "first_message": None,
        "turns": [{"turn": 0, "message": "hi", "reply": "hi", "events": []}],
        "total_turns": 1,
    }


def test_an_episode_page_shows_one_duration_the_results() -> None:
    html = _episode("b.t.s0", _episode_data())
    shown = re.findall(r"\d+\.\d+ s\b", html)
    assert shown == ["1.14 s"], shown
    assert "1 turn ·" in html and "1 turns" not in html


def test_short_arrays_of_scalars_stay_on_one_line() -> None:
    assert _text([1, 2, 3]) == "[1, 2, 3]"
    assert _text({"q": [1, 2], "n": {"deep": ["a", None, True]}}) == (
        '{\n "q": [1, 2],\n "n": {\n  "deep": ["a", null, true]\n }\n}'
    )
    long = list(range(40))
    assert _text(long).count("\n") == 41  # a long one: one element per line
    assert _text([{"a": 1}]) == '[\n {\n  "a": 1\n }\n]'
    assert _text([]) == "[]" and _text({}) == "{}"


def test_equal_values_make_one_centred_bar() -> None:
    html = _bars(histogram([1.0, 1.0, 1.0]), _num)
    assert html.count('<div style="height') == 1
    assert 'class="bars one"' in html
    assert re.findall(r"<span>([^<]*)</span>", html) == ["1.000"]
    turns = _bars(histogram([3, 3], integers=True), str)
    assert 'class="bars one"' in turns and re.findall(r"<span>([^<]*)</span>", turns) == ["3"]
    spread = _bars(histogram([0.0, 1.0]), _num)
    assert 'class="bars"' in spread and len(re.findall(r"<span>", spread)) == 2


CASES: list[Any] = [
    [1, 2, 3],
    {"q": [1, 2], "n": {"deep": ["a", None, True]}, "é": "ü"},
    [{"a": 1}, [2, [3]]],
    [],
    {},
    list(range(40)),
    "x",
    5,
    None,
]


@pytest.mark.skipif(shutil.which("node") is None, reason="the script's twin needs `node` on PATH")
def test_the_scripts_twins_give_the_same_text() -> None:
    # common.js's prettyJson and plural, run by node, against markup.py's.
    script = (STATIC / "common.js").read_text() + (
        "\nconst cases = JSON.parse(process.argv[1]);"
        "\nconsole.log(JSON.stringify({json: cases.map((c) => prettyJson(c)),"
        " counts: [plural(1, 'batch'), plural(2, 'batch'), plural(0, 'episode')],"
        " durations: [episodeDuration(DONE), episodeDuration(RUNNING)]}));"
    )
    done, running = _episode_data(), {**_episode_data(), "result": None}
    script = f"const DONE = {json.dumps(done)}, RUNNING = {json.dumps(running)};\n" + script
    out = subprocess.run(
        ["node", "-e", script, json.dumps(CASES)], capture_output=True, text=True, check=True
    ).stdout
    got = json.loads(out)
    assert got["json"] == [pretty_json(c) for c in CASES]
    assert (
        got["durations"]
        == [
            duration_of(done["episode"], done["result"]),
            duration_of(running["episode"], None),
        ]
        == [1.14, 1.2]
    )
    assert got["counts"] == [plural(1, "batch"), plural(2, "batch"), plural(0, "episode")]
