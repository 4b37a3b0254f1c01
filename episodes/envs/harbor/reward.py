"""A Harbor verifier's reward, read strictly: a finite number, or the episode's env_error.

`reward.txt` holds one decimal number (`1`, `0.5`, `-2`, `1e-3`): not `nan`, `inf`,
`1_0` (Python's float() reads that as 10.0) or hex. In `reward.json` (an object) the
reward is its `reward` key, or its only number; a boolean is not a number, and
`NaN`/`Infinity` (which Python's json accepts) or a number too big for a float are
refused anywhere in the file. What a verifier writes otherwise is the task's defect,
not a score: `RewardError` ends the episode `env_error`, naming the file and value.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

# A decimal number, as a verifier prints one (no '_' separators, no hex, no words).
_DECIMAL = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


class RewardError(ValueError):
    """The verifier wrote a reward that is not a finite number (one line, with the file)."""


def _shown(value: Any) -> str:
    return repr(value)[:100]


def finite(value: Any) -> bool:
    """A real number (not a bool) that is finite."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int past a float's range
        return False


def parse_txt(raw: bytes, name: str = "reward.txt") -> float:
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise RewardError(f"{name} is not text: {_shown(raw)}") from None
    if not _DECIMAL.fullmatch(text):
        raise RewardError(f"{name} is not a finite number: {_shown(text)}")
    value = float(text)
    if not math.isfinite(value):  # 1e999
        raise RewardError(f"{name} is not a finite number: {_shown(text)}")
    return value


def parse_json(raw: bytes, name: str = "reward.json") -> tuple[float | None, dict[str, Any]]:
    """The reward (None when the object has several numbers and no `reward` key) and the
    whole object."""

    def constant(word: str) -> Any:
        raise RewardError(f"{name} holds {word}, which is not a finite number")

    def number(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            raise RewardError(f"{name} holds {text[:100]}, which is not a finite number")
        return value

    try:
        data = json.loads(raw, parse_constant=constant, parse_float=number)
    except RewardError:
        raise
    except json.JSONDecodeError as e:
        raise RewardError(f"{name} is not JSON ({e.msg}): {_shown(raw[:100])}") from None
    except ValueError as e:  # not UTF-8, an integer of thousands of digits
        raise RewardError(f"{name} cannot be read ({e}): {_shown(raw[:100])}") from None
    if not isinstance(data, dict):
        raise RewardError(f"{name} is not an object: {_shown(data)}")
    if "reward" in data:
        if not finite(data["reward"]):
            raise RewardError(f"{name}: 'reward' is not a finite number: {_shown(data['reward'])}")
        return float(data["reward"]), data
    numbers = [v for v in data.values() if finite(v)]
    if len(numbers) == 1:
        return float(numbers[0]), data
    return None, data
