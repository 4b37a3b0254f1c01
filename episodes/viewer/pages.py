"""The first view of each page, rendered here with its data: a browser without script,
a headless screenshot, `curl` and a slow machine see the content, not "loading…".

Each page's HTML file has `<main id="main">`; this fills it with what the page's
script shows first (from the same data as the API: `batch_view` is `/api/batch`), and
the script, once it runs, replaces it with the live page (polling, paging, search).
Plain markup, every value escaped (its pieces: episodes/viewer/markup.py).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from temporalio.client import Client

import episodes.viewer.visibility as visibility
from episodes.client.histories.outcomes import batch_manifest
from episodes.errors import EpisodesError
from episodes.evals.comparison import compare
from episodes.evals.manifest import differences, unpinned
from episodes.viewer.markup import (
    _a,
    _banner,
    _bars,
    _batch_link,
    _card,
    _dur,
    _e,
    _episode_link,
    _fmt,
    _num,
    _pill,
    _signed,
    _table,
    _text,
    _when,
)
from episodes.viewer.members import batch_rows
from episodes.viewer.priority import batch_priority
from episodes.viewer.stats import batch_stats, latest_attempts, outcomes
from episodes.viewer.transcripts import Episodes, NotFound
from episodes.words import plural, usd

log = logging.getLogger(__name__)
FIRST_TURNS = 50  # the episode page's first page of turns (as its script asks)
COMPARE_TURNS = 100


async def batch_view(client: Client, name: str, threshold: float = 1.0) -> dict[str, Any]:
    """`/api/batch`: the batch's figures (its final attempts) and every attempt's row."""
    rows, truncated = await batch_rows(client, name)
    if not rows:
        raise NotFound(f"no episodes in batch {name!r}")
    stats = batch_stats(rows, threshold)
    rows.sort(key=lambda r: (r.get("task") or "", r.get("sample") or 0, r.get("start") or ""))
    priority = await batch_priority(client, name, rows)
    return {
        "batch": name,
        "stats": stats,
        "episodes": rows,
        "truncated": truncated,
        "fleet": priority,  # the key batch.js and API readers know (priority, fairness, budget)
    }


async def batches_compared(
    client: Client, a: str, b: str, threshold: float = 1.0
) -> dict[str, Any]:
    """`/api/compare-batches`: B against A paired by task (`episodes.evals.comparison`),
    from the batches' visibility rows as their batch pages read them, and the warnings
    of their manifests (`episodes.evals.manifest`)."""
    read = []
    for name in (a, b):
        rows, truncated = await batch_rows(client, name)
        if not rows:
            raise NotFound(f"no episodes in batch {name!r}")
        final = latest_attempts(rows)
        manifest = await batch_manifest(client, name, [r["id"] for r in final[:3]])
        read.append((outcomes(final), manifest, truncated))
    try:
        result = compare(read[0][0], read[1][0], threshold)
    except EpisodesError as e:
        raise visibility.BadQuery(str(e)) from None
    return {
        "batches": {"a": a, "b": b},
        **result.as_dict(),
        "warnings": differences(read[0][1], read[1][1]),
        "notes": unpinned(read[0][1], read[1][1]),
        "truncated": read[0][2] or read[1][2],
    }


def _threshold(query: Mapping[str, str]) -> float:
    try:
        return float(query.get("threshold") or 1.0)
    except ValueError:
        raise visibility.BadQuery("threshold must be a number") from None


async def first_view(
    page: str,
    match: Mapping[str, str],
    query: Mapping[str, str],
    *,
    client: Client,
    episodes: Episodes,
) -> tuple[str, str, int]:
    """(title, the `<main>` markup, HTTP status) of `page` at its first view."""
    try:
        if page == "index":
            return "episodes", await _index(client, query), 200
        if page == "batch":
            name = match["id"]
            data = await batch_view(client, name, _threshold(query))
            return f"{name} · episodes", _batch(data), 200
        if page == "compare-batches":
            a, b = query.get("a") or "", query.get("b") or ""
            if not (a and b):
                raise visibility.BadQuery(
                    "comparing needs two batches: /compare-batches?a=<batch>&b=<batch>"
                )
            data = await batches_compared(client, a, b, _threshold(query))
            return f"{a} vs {b} · episodes", _batches_compared(data), 200
        if page == "episode":
            wid = match["id"]
            data = await episodes.page(wid, 0, FIRST_TURNS)
            return f"{wid} · episodes", _episode(wid, data), 200
        ids = [query.get("a") or "", query.get("b") or ""]
        if not all(ids):
            raise visibility.BadQuery(
                "compare needs two episodes: /compare?a=<workflow id>&b=<workflow id>"
            )
        pages = [await episodes.page(i, 0, COMPARE_TURNS) for i in ids]
        return "compare · episodes", _compare(ids, pages), 200
    except NotFound as e:
        return "episodes", _banner(str(e)), 404
    except visibility.BadQuery as e:
        return "episodes", _banner(str(e)), 400
    except Exception as e:  # a failed RPC: the page says so, the script may do better
        log.exception("viewer page %s failed", page)
        first = (str(e) or type(e).__name__).splitlines()[0]
        return "episodes", _banner(f"{type(e).__name__}: {first}"), 500


# -- pages ---------------------------------------------------------------------------


async def _index(client: Client, query: Mapping[str, str]) -> str:
    filters = visibility.Filters.from_params(query)
    data = await visibility.batches(client, filters)
    more = " (more exist: narrow the search)" if data["truncated"] else ""
    parts = [
        "<h1>Batches</h1>",
        f'<p class="muted small">{plural(len(data["batches"]), "batch")} in the latest '
        f"{plural(data['scanned'], 'episode')}{more}</p>",
    ]
    rows = [
        [
            _a(_batch_link(b["batch"]), b["batch"]),
            _e(b["env"]),
            _e(b["episodes"]),
            _e(f"{b['running']} running") if b["running"] else "",
            _num(b["mean_reward"]),
            _when(b["first_start"]),
            _when(b["last_start"]),
        ]
        for b in data["batches"]
    ]
    head = ["batch", "env", "episodes", "", "mean reward", "first started", "last started"]
    parts.append(_table(head, rows) if rows else "<p>No episodes match.</p>")
    if any(query.get(k) for k in query):
        found, truncated = await visibility.list_rows(client, filters.query(), 200)
        parts += [
            "<h2>Episodes</h2>",
            f'<p class="muted small mono">{_e(filters.query())}</p>',
            _table(
                ["episode", "batch", "task", "outcome", "reward", "turns", "duration", "started"],
                [
                    [
                        _a(_episode_link(r["id"]), r["id"]),
                        _a(_batch_link(r["batch"]), r["batch"]) if r["batch"] else "",
                        _e(r["task"]),
                        _pill(r),
                        _num(r["reward"]),
                        _e(r["turns"] if r["turns"] is not None else "-"),
                        _dur(r["duration_s"]),
                        _when(r["start"]),
                    ]
                    for r in found
                ],
            ),
            '<p class="muted small">first 200 shown</p>' if truncated else "",
        ]
    return "\n".join(parts)


def _batch(data: dict[str, Any]) -> str:
    s, rows = data["stats"], data["episodes"]
    env = rows[0].get("env") or "" if rows else ""
    shown = " · showing the first episodes only" if data["truncated"] else ""
    attempts = f"{s['attempts']} attempts" if s["attempts"] > s["episodes"] else None
    sides = s["sides"]
    cards = [
        _card("episodes", s["episodes"], attempts),
        _card("running", s["running"]),
        _card("mean reward", _num(s["mean_reward"]), f"over {s['rewarded']} rewarded"),
        *(_card(f"pass@{k}", _num(v)) for k, v in s["pass_at_k"].items()),
        _card("agent failures", sides.get("agent", 0)),
        _card("infra failures", sides.get("infra", 0)),
        _card("env errors", sides.get("env", 0)),
        *_priority_cards(data.get("fleet") or {}),
    ]
    d, t = s["duration_s"], s["turns"]
    groups = [
        [
            _e(g["task"]),
            _e(f"{g['passed']}/{g['done']}"),
            _num(g["mean_reward"]),
            " ".join(
                _a(
                    _episode_link(m["id"]),
                    f"s{m['sample']} {_fmt(m['reward'], 2)} ({_signed(m['advantage'])})",
                )
                for m in g["samples"]
            ),
        ]
        for g in s["groups"]
    ]
    episodes = [
        [
            _a(_episode_link(r["id"]), r["id"]),
            _e(r.get("task")),
            _e(r.get("sample")),
            _pill(r) + ("" if r.get("final", True) else ' <span class="small">replaced</span>'),
            _num(r.get("reward")),
            _signed(r.get("advantage")),
            _e(r["turns"] if r.get("turns") is not None else "-"),
            _dur(r.get("duration_s")),
            _when(r.get("start")),
        ]
        for r in rows
    ]
    terminations = [[_e(k), _e(n)] for k, n in s["terminations"].items()]
    return "\n".join(
        [
            f"<h1>{_e(data['batch'])}</h1>",
            f'<div class="muted small">{_e(env)} · pass threshold {_e(s["threshold"])}'
            f"{_e(shown)}</div>",
            f'<div class="cards">{"".join(cards)}</div>',
            f'<h2>With their noise <span class="muted small">{_e(_level(s["intervals"]))} '
            "intervals, over tasks</span></h2>",
            _table(["", "value", "interval", "standard error"], _figures(s["intervals"])),
            _compare_form(data["batch"], s["threshold"]),
            "<h2>Terminations</h2>",
            _table(["termination", "episodes"], terminations),
            '<div class="grid3">',
            f"<div><h2>Reward</h2>{_bars(s['reward_histogram'], lambda x: _fmt(x, 2))}</div>",
            f'<div><h2>Duration <span class="muted small">p50 {_dur(d["p50"])} · p90 '
            f"{_dur(d['p90'])} · max {_dur(d['max'])}</span></h2>{_bars(d['histogram'], _dur)}"
            "</div>",
            f'<div><h2>Turns <span class="muted small">p50 {_fmt(t["p50"], 0)} · p90 '
            f"{_fmt(t['p90'], 0)} · max {_fmt(t['max'], 0)}</span></h2>"
            f"{_bars(t['histogram'], lambda x: _fmt(x, 0))}</div>",
            "</div>",
            f"<h2>Tasks ({len(groups)})</h2>",
            _table(["task", "passed", "mean", "samples: reward (advantage)"], groups),
            f"<h2>Episodes ({len(rows)})</h2>",
            _table(
                [
                    "episode",
                    "task",
                    "sample",
                    "outcome",
                    "reward",
                    "advantage",
                    "turns",
                    "duration",
                    "started",
                ],
                episodes,
            ),
        ]
    )


def _level(summary: Mapping[str, Any]) -> str:
    return f"{summary['level']:.0%}"


def _interval(iv: list[float] | None) -> str:
    return f"[{_fmt(iv[0])}, {_fmt(iv[1])}]" if iv else "-"


def _figure_rows(summary: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any] | None]]:
    """(label, estimate) of a batch's figures (`episodes.evals.summary.BatchSummary`)."""
    rows: list[tuple[str, Mapping[str, Any] | None]] = [
        ("mean reward", summary["mean_reward"]),
        (f"pass rate (reward ≥ {summary['threshold']:g}, Wilson)", summary["pass_rate"]),
    ]
    rows += [(f"pass@{k}", e) for k, e in summary["pass_at_k"].items()]
    rows += [(f"pass^{k}", e) for k, e in summary["pass_hat_k"].items() if str(k) != "1"]
    return rows


def _figures(summary: Mapping[str, Any]) -> list[list[str]]:
    """A batch's figures as table rows: value, interval, standard error."""
    return [
        [
            _e(label),
            _num(e["value"] if e else None),
            _e(_interval(e["interval"] if e else None)),
            _num(e["standard_error"] if e else None),
        ]
        for label, e in _figure_rows(summary)
    ]


def _compare_form(batch: str, threshold: float) -> str:
    """A form to the comparison page with this batch as A (a plain GET: no script)."""
    return (
        '<form class="filters" method="get" action="/compare-batches">'
        f'<input type="hidden" name="a" value="{_e(batch)}">'
        f'<input type="hidden" name="threshold" value="{_e(threshold)}">'
        '<label>compare with batch <input name="b" required size="32"></label> '
        '<button type="submit">Compare</button></form>'
    )


def _batches_compared(d: Mapping[str, Any]) -> str:
    """Two batches side by side, the difference and its verdict, the flipped tasks."""
    a, b = d["batches"]["a"], d["batches"]["b"]
    sa, sb = d["a"], d["b"]
    head = [
        f"<h1>{_a(_batch_link(a), a)} (A) vs {_a(_batch_link(b), b)} (B)</h1>",
        f'<div class="muted small">pass threshold {_e(sa["threshold"])} · '
        f"{_e(_level(sa))} intervals over tasks"
        + (" · showing the first episodes only" if d.get("truncated") else "")
        + "</div>",
    ]
    head += [f'<div class="banner">{_e(w)}</div>' for w in d["warnings"]]
    iv = d["interval"]
    verdict = "beyond the noise" if d["significant"] else "within the noise"
    head.append(
        '<div class="cards">'
        + _card("difference (B - A)", _signed(d["difference"]), "mean reward over paired tasks")
        + _card(f"{_level(sa)} interval", _interval(iv))
        + _card("p-value", f"{d['p_value']:.4g}", "paired sign-flip test over tasks")
        + _card("verdict", verdict, f"p < {d['alpha']:g}" if d["significant"] else None)
        + _card("flipped", f"{len(d['flipped'])} of {d['paired_tasks']}", "tasks")
        + "</div>"
    )
    by_label_b = dict(_figure_rows(sb))
    rows = [
        ["tasks", _e(sa["tasks"]), _e(sb["tasks"])],
        ["episodes", _e(sa["episodes"]), _e(sb["episodes"])],
    ]
    for label, ea in _figure_rows(sa):
        eb = by_label_b.get(label)
        rows.append(
            [
                _e(label),
                f"{_num(ea['value'] if ea else None)} {_e(_interval(ea['interval'] if ea else None))}",
                f"{_num(eb['value'] if eb else None)} {_e(_interval(eb['interval'] if eb else None))}",
            ]
        )
    flipped = [
        [
            _e(f["task"]),
            _e("pass" if f["a"] else "fail"),
            _e("pass" if f["b"] else "fail"),
        ]
        for f in d["flipped"]
    ]
    unpaired = ""
    if d["only_a"] or d["only_b"]:
        unpaired = (
            f'<p class="muted small">unpaired, left out: {len(d["only_a"])} only in A, '
            f"{len(d['only_b'])} only in B</p>"
        )
    return "\n".join(
        [
            *head,
            "<h2>Side by side</h2>",
            _table(["", f"A: {a}", f"B: {b}"], rows),
            unpaired,
            f"<h2>Flipped tasks ({len(flipped)})</h2>",
            _table(["task", "A", "B"], flipped) if flipped else "<p>No task flipped.</p>",
            *(f'<p class="muted small">note: {_e(n)}</p>' for n in d["notes"]),
        ]
    )


def usage_text(u: Mapping[str, Any]) -> str:
    """A model's calls and tokens as the upstream reported them (episode.js's too)."""
    cached = f" ({u['cached_tokens']} cached)" if u.get("cached_tokens") else ""
    reasoning = f" ({u['reasoning_tokens']} reasoning)" if u.get("reasoning_tokens") else ""
    return (
        f"{plural(u['calls'], 'call')}: {u['input_tokens']} in{cached}, "
        f"{u['output_tokens']} out{reasoning}"
    )


def cost_text(c: Mapping[str, Any]) -> str:
    text = f"{usd(c['model'] + c['box'])} (models {usd(c['model'])}, boxes {usd(c['box'])})"
    return text + (f"; no price for {', '.join(c['unpriced'])}" if c.get("unpriced") else "")


def duration_of(e: Mapping[str, Any], r: Mapping[str, Any] | None) -> float | None:
    """An episode's one duration: its result's `duration_s` (what `episodes run` and
    `episodes show` print) once it has one; before that, the workflow's time since it
    started (visibility's start to close). episode.js's header shows the same."""
    if r is not None and r.get("duration_s") is not None:
        return float(r["duration_s"])
    return e.get("duration_s")


def _episode(wid: str, d: dict[str, Any]) -> str:
    e, r = d["episode"], d["result"]
    head = [
        f'<h1 class="mono">{_e(wid)}</h1>',
        f'<div class="row">{_pill(e)} reward <b>{_num(e.get("reward"))}</b> · '
        f"{_e(plural(e['turns'] if e.get('turns') is not None else d['total_turns'], 'turn'))}"
        f" · {_dur(duration_of(e, r))}"
        + (f" · {_a(_batch_link(e['batch']), 'batch ' + e['batch'])}" if e.get("batch") else "")
        + f" · task {_e(e.get('task') or '?')} · sample {_e(e.get('sample'))}</div>",
    ]
    if d["undecodable"]:
        head.append(
            f'<div class="banner">encrypted: {len(d["undecodable"])} payload(s) could not be '
            "decoded. Start the viewer with the workers' payload keys to read them.</div>"
        )
    if r:
        head.append("<h2>Outcome</h2>")
        spent = "".join(
            f"<dt>model {_e(m)}</dt><dd>{_e(usage_text(u))}</dd>"
            for m, u in (r.get("usage") or {}).items()
        )
        if r.get("cost"):
            spent += f"<dt>cost</dt><dd>{_e(cost_text(r['cost']))}</dd>"
        head.append(
            f'<dl class="kv"><dt>termination</dt><dd>{_e(r["termination"])}</dd>'
            f"<dt>reward</dt><dd>{_num(r['reward'])}</dd>{spent}</dl>"
        )
        if r["error"]["message"]:
            head.append(f'<pre class="error">{_e(r["error"]["message"])}</pre>')
    head.append("<h2>Conversation</h2>")
    turns = [_turn(t) for t in d["turns"]]
    if not turns and d.get("first_message") is not None:
        turns.append(f"<pre>{_e(_text(d['first_message']))}</pre>")
    shown = len(d["turns"])
    if d["total_turns"] > shown:
        turns.append(f'<p class="muted">{shown} of {plural(d["total_turns"], "turn")} shown</p>')
    return "\n".join(head + turns)


def _priority_cards(f: Mapping[str, Any]) -> list[str]:
    """Priority, fairness key, and a batch workflow's status and spending (as batch.js)."""
    cards = []
    if f.get("priority") is not None:
        cards.append(_card("priority", f["priority"], "1 first .. 5 last"))
    if f.get("fairness_key"):
        cards.append(_card("fairness key", f["fairness_key"]))
    if f.get("live") is not None:
        cards.append(_card("live", f["live"], f"{f['waiting']} wait for a box"))
        cards.append(_card("parked", f.get("parked", 0), "no box; resume goes on"))
    if f.get("status") == "budget_exhausted":
        cards.append(_card("budget_exhausted", f.get("budget") or "", "no more episodes started"))
    if f.get("model_calls"):
        cards.append(_card("model tokens", f["model_tokens"], plural(f["model_calls"], "call")))
    if f.get("episode_seconds") is not None:
        cards.append(_card("episode time", _dur(f["episode_seconds"]), "summed"))
    if f.get("cost"):
        c = f["cost"]
        cards.append(
            _card(
                "cost",
                usd(c["model"] + c["box"]),
                f"{plural(f['priced'], 'episode')} priced: models {usd(c['model'])}, "
                f"boxes {usd(c['box'])}",
            )
        )
    if f.get("groups_zero_variance") is not None:
        cards.append(_card("zero-variance groups", f["groups_zero_variance"], "no GRPO signal"))
    return cards


def _compare(ids: list[str], pages: list[dict[str, Any]]) -> str:
    a, b = (p["episode"].get("task") for p in pages)
    title = f"task {a}" if a == b else "different tasks"
    columns = []
    for wid, d in zip(ids, pages, strict=True):
        e = d["episode"]
        columns.append(
            f'<div><h2 class="mono">{_a(_episode_link(wid), wid)}</h2>'
            f'<div class="row">{_pill(e)} reward {_num(e.get("reward"))} · '
            f"{plural(d['total_turns'], 'turn')}</div>"
            + "".join(_turn(t) for t in d["turns"])
            + "</div>"
        )
    return f'<h1>Compare · {_e(title)}</h1><div class="cols">{"".join(columns)}</div>'


def _turn(t: dict[str, Any]) -> str:
    if t.get("undecodable"):
        return (
            f'<section class="turn"><div class="head"><b>Turn {_e(t["turn"])}</b></div>'
            '<div class="banner">encrypted: this viewer has no key for this turn</div></section>'
        )
    said = t.get("error") if t.get("error") or t.get("error_type") else t.get("reply")
    who = (t.get("error_type") or "error") if t.get("error") or t.get("error_type") else "harness"
    calls = (
        f'<div class="small muted">{plural(len(t["events"]), "call")}</div>'
        if t.get("events")
        else ""
    )
    return (
        f'<section class="turn" id="turn-{_e(t["turn"])}"><div class="head"><b>Turn '
        f'{_e(t["turn"])}</b></div><div class="who">env</div><pre>{_e(_text(t.get("message")))}'
        f'</pre>{calls}<div class="who">{_e(who)}</div><pre>{_e(_text(said))}</pre></section>'
    )
