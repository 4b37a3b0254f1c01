"""The small pieces the viewer's first views are made of (episodes/viewer/pages.py):
links, numbers, durations, pills, cards, tables, histograms. Every value escaped."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime
from html import escape
from typing import Any
from urllib.parse import quote


def _e(value: Any) -> str:
    return "" if value is None else escape(str(value))


def _a(href: str, text: Any) -> str:
    return f'<a href="{escape(href)}">{_e(text)}</a>'


def _batch_link(name: str) -> str:
    return "/batch/" + quote(name, safe="")


def _episode_link(wid: str) -> str:
    return "/episode/" + quote(wid, safe="")


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "-"
    return f"{x:.{digits}f}" if isinstance(x, int | float) else str(x)


def _num(x: Any, digits: int = 3) -> str:
    return _e(_fmt(x, digits))


def _signed(x: float | None) -> str:
    if x is None:
        return "-"
    return ("+" if x > 0 else "-" if x < 0 else "±") + f"{abs(x):.3f}"


def _dur(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 120:
        return f"{s:.{2 if s < 10 else 1}f} s"
    return f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


def _when(iso: str | None) -> str:
    return datetime.fromisoformat(iso).strftime("%Y-%m-%d %H:%M:%S UTC") if iso else "-"


INLINE_CHARS = 80
"""An array of scalars this short (as JSON) stays on one line: `[1, 2, 3]`."""


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else pretty_json(value)


def pretty_json(value: Any, level: int = 0) -> str:
    """JSON one item a line, indented by one space a level, except that an array of
    scalars short enough stays on one line (`common.js`'s `prettyJson` is the twin)."""
    pad = " " * (level + 1)
    if isinstance(value, list) and value:
        if all(not isinstance(v, list | dict) for v in value):
            flat = json.dumps(value, ensure_ascii=False)
            if len(flat) <= INLINE_CHARS:
                return flat
        items = [pad + pretty_json(v, level + 1) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + pad[:-1] + "]"
    if isinstance(value, dict) and value:
        items = [
            f"{pad}{json.dumps(str(k), ensure_ascii=False)}: {pretty_json(v, level + 1)}"
            for k, v in value.items()
        ]
        return "{\n" + ",\n".join(items) + "\n" + pad[:-1] + "}"
    return json.dumps(value, ensure_ascii=False)


def _pill(row: Mapping[str, Any]) -> str:
    text = row.get("termination") or row.get("status") or "running"
    return f'<span class="pill {_e(row.get("side") or "")}">{_e(text)}</span>'


def _card(key: str, value: Any, title: str | None = None) -> str:
    tip = f' title="{_e(title)}"' if title else ""
    return f'<div class="card"{tip}><div class="v">{_e(value)}</div><div class="k">{_e(key)}</div></div>'


def _table(head: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{_e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def _bars(hist: dict[str, Any], fmt: Callable[[Any], str]) -> str:
    """A histogram as the page's script draws it: a bar per bin, the ends labelled."""
    counts, edges = hist.get("counts") or [], hist.get("edges") or []
    if not counts:
        return '<div class="muted small">no data</div>'
    labels = hist.get("labels") or [
        f"{fmt(edges[i])} - {fmt(edges[i + 1])}" for i in range(len(counts))
    ]
    if len(counts) == 1:
        # One bin (every value equal): one centred bar under one label, not a bar
        # filling the chart between two labels of the same value.
        label = labels[0] if "labels" in hist else fmt(edges[0])
        return (
            f'<div><div class="bars one"><div style="height:100.0%" title="{_e(label)}: '
            f'{counts[0]}"></div></div><div class="axis one"><span>{_e(label)}</span></div></div>'
        )
    ends = (labels[0], labels[-1]) if "labels" in hist else (fmt(edges[0]), fmt(edges[-1]))
    top = max(max(counts), 1)
    bars = "".join(
        f'<div style="height:{100 * c / top:.1f}%" title="{_e(label)}: {c}"></div>'
        for c, label in zip(counts, labels, strict=True)
    )
    return (
        f'<div><div class="bars">{bars}</div><div class="axis"><span>{_e(ends[0])}</span>'
        f"<span>{_e(ends[1])}</span></div></div>"
    )


def _banner(message: str) -> str:
    return f'<div class="banner bad">{_e(message)}</div>'
