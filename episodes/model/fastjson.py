"""JSON on the model proxy's path per call, in pydantic_core's Rust code where it gives
the same answer as the standard library (bench/README.md, issue 32: at 256 sessions
calling with token data, `json` was most of the worker's CPU per call).

- `loads`: what `json.loads` returns, parsed by `pydantic_core.from_json` (jiter, 2-5x
  faster on an answer with token data). What jiter refuses, `json.loads` decides: a lone
  surrogate escape, UTF-16 or a byte-order mark, invalid text (its error, as before).
  Depth is the callers' to check first (`episodes.json_depth`), as it was.
- `dumps`: the JSON text of a value as bytes, for a request's body sent upstream:
  `pydantic_core.to_json` (compact, UTF-8; ~6x faster than `json.dumps` on a request
  of ~700 bytes), which an upstream reads as the same value `json.dumps` gives. What it
  refuses (a lone surrogate, which `json.loads` lets through; deeper than it recurses),
  `json.dumps` writes, as before. NaN and infinities are written as `json.dumps` does.
- `encoded_size`: `episodes.truncate.json_size` (its old name here), the bytes a value
  takes as compact UTF-8 JSON, for the budgets.
"""

from __future__ import annotations

import json
from typing import Any

import pydantic_core

from episodes.truncate import json_size as encoded_size

__all__ = ["dumps", "encoded_size", "loads"]


def loads(raw: bytes | str) -> Any:
    try:
        return pydantic_core.from_json(raw)
    except ValueError:
        return json.loads(raw)


def dumps(value: Any) -> bytes:
    try:
        return pydantic_core.to_json(value, inf_nan_mode="constants")
    except ValueError:
        return json.dumps(value).encode()
