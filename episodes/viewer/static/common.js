// Shared by every page: DOM building, API calls, formatting.
"use strict";

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

async function api(path, params) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== null && v !== undefined && v !== "") url.searchParams.set(k, v);
  }
  const resp = await fetch(url);
  let data;
  try { data = await resp.json(); } catch (e) { data = { error: resp.statusText }; }
  if (!resp.ok) throw new Error(data.error || resp.statusText);
  return data;
}

const link = {
  batch: (id) => "/batch/" + encodeURIComponent(id),
  episode: (id) => "/episode/" + encodeURIComponent(id),
  compare: (a, b) => "/compare?a=" + encodeURIComponent(a) + "&b=" + encodeURIComponent(b),
};

function pathId(prefix) {
  return decodeURIComponent(location.pathname.slice(prefix.length));
}

function num(x, digits) {
  if (x === null || x === undefined) return "–";
  if (typeof x !== "number") return String(x);
  return x.toFixed(digits === undefined ? 3 : digits);
}

// An amount in US dollars (episodes/words.py's `usd`): `$12.35`, or `$0.000297`.
function usd(x) {
  if (x === 0) return "$0";
  if (Math.abs(x) >= 1) return "$" + x.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 });
  const decimals = Math.min(12, 3 - Math.floor(Math.log10(Math.abs(x))));  // four significant digits
  return "$" + x.toFixed(decimals).replace(/0+$/, "").replace(/\.$/, "");
}

function signed(x) {
  if (x === null || x === undefined) return "–";
  return (x > 0 ? "+" : x < 0 ? "−" : "±") + Math.abs(x).toFixed(3);
}

function dur(s) {
  if (s === null || s === undefined) return "–";
  if (s < 1) return (s * 1000).toFixed(0) + " ms";
  if (s < 120) return s.toFixed(s < 10 ? 2 : 1) + " s";
  if (s < 7200) return (s / 60).toFixed(1) + " min";
  return (s / 3600).toFixed(1) + " h";
}

function ms(x) {
  if (x === null || x === undefined) return "";
  return x < 1000 ? x.toFixed(x < 10 ? 1 : 0) + " ms" : (x / 1000).toFixed(2) + " s";
}

function bytes(n) {
  if (n < 1024) return n + " B";
  if (n < 1048576) return (n / 1024).toFixed(1) + " KB";
  return (n / 1048576).toFixed(1) + " MB";
}

function when(iso) {
  if (!iso) return "–";
  const d = new Date(iso);
  const pad = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

function pill(text, side) {
  return h("span", { class: "pill " + (side || "") }, text === null ? "running" : text);
}

function outcome(row) {
  return pill(row.termination || row.status, row.side);
}

function text(value) {
  if (value === null || value === undefined) return "";
  return typeof value === "string" ? value : prettyJson(value);
}

// An episode's one duration (pages.py's duration_of): its result's once it has one,
// else the workflow's time since it started.
function episodeDuration(d) {
  const r = d.result;
  return r && r.duration_s !== null && r.duration_s !== undefined ? r.duration_s : d.episode.duration_s;
}

// `1 batch`, `2 batches` (episodes/words.py's `plural`).
function plural(n, noun) {
  if (n === 1) return `${n} ${noun}`;
  return `${n} ${noun}${/(s|ch|sh|x)$/.test(noun) ? "es" : "s"}`;
}

// JSON one item a line, except a short array of scalars: `[1, 2, 3]` (markup.py's
// `pretty_json`: the same text, from the same rules).
const INLINE_CHARS = 80;
function prettyJson(value, level = 0) {
  const pad = " ".repeat(level + 1);
  const close = " ".repeat(level);
  if (Array.isArray(value) && value.length) {
    if (value.every((v) => v === null || typeof v !== "object")) {
      const flat = "[" + value.map((v) => JSON.stringify(v)).join(", ") + "]";
      if (flat.length <= INLINE_CHARS) return flat;
    }
    return "[\n" + value.map((v) => pad + prettyJson(v, level + 1)).join(",\n") + "\n" + close + "]";
  }
  if (value !== null && typeof value === "object" && Object.keys(value).length) {
    const items = Object.entries(value).map(([k, v]) => `${pad}${JSON.stringify(k)}: ${prettyJson(v, level + 1)}`);
    return "{\n" + items.join(",\n") + "\n" + close + "}";
  }
  return JSON.stringify(value);
}

function topbar(...crumbs) {
  const bar = h("header", { class: "top" }, h("a", { class: "home", href: "/" }, "episodes"));
  for (const c of crumbs) bar.append(h("span", { class: "crumb" }, "/"), c);
  bar.append(h("span", { class: "right", id: "live" }));
  document.body.prepend(bar);
}

function fail(where, err) {
  where.replaceChildren(h("div", { class: "banner bad" }, String(err.message || err)));
}

// A tiny bar chart of a histogram {edges, counts, labels?}: `labels` name each bin's
// values (turn counts: "1", "10-14"); without them a bin is its edges' range.
function bars(hist, fmt) {
  if (!hist || !hist.counts || !hist.counts.length) return h("div", { class: "muted small" }, "no data");
  const top = Math.max(...hist.counts, 1);
  const e = hist.edges;
  const n = hist.counts.length;
  const label = (i) => hist.labels ? hist.labels[i] : `${fmt(e[i])} – ${fmt(e[i + 1])}`;
  if (n === 1) {  // every value equal: one centred bar under one label
    const only = hist.labels ? hist.labels[0] : fmt(e[0]);
    return h("div", {}, h("div", { class: "bars one" }, h("div", { style: "height:100.0%", title: `${only}: ${hist.counts[0]}` })),
      h("div", { class: "axis one" }, h("span", {}, only)));
  }
  const box = h("div", { class: "bars" }, hist.counts.map((c, i) =>
    h("div", { style: `height:${(100 * c / top).toFixed(1)}%`, title: `${label(i)}: ${c}` })));
  const ends = hist.labels ? [hist.labels[0], n > 1 ? hist.labels[n - 1] : ""] : [fmt(e[0]), fmt(e[e.length - 1])];
  return h("div", {}, box, h("div", { class: "axis" }, h("span", {}, ends[0]), h("span", {}, ends[1])));
}

function poller(fn, ms) {
  let timer = null;
  const tick = async () => {
    const again = await fn().catch(() => true);
    timer = again ? setTimeout(tick, ms) : null;
  };
  return { start: () => { if (!timer) timer = setTimeout(tick, ms); } };
}
