// `/batch/<id>`: counts, the infra/agent split, rewards, pass@k, task groups, episodes,
// search; polled while episodes run.
"use strict";

const batchId = pathId("/batch/");
const threshold = new URLSearchParams(location.search).get("threshold") || "";

function card(k, v, title) {
  return h("div", { class: "card", title }, h("div", { class: "v" }, v), h("div", { class: "k" }, k));
}

function cards(s, priority) {
  const passK = Object.entries(s.pass_at_k).map(([k, v]) => card(`pass@${k}`, num(v, 3)));
  return h("div", { class: "cards" },
    card("episodes", s.episodes, s.attempts > s.episodes ? `${s.attempts} attempts` : null),
    card("running", s.running),
    card("mean reward", num(s.mean_reward), `over ${s.rewarded} rewarded`),
    passK,
    card("agent failures", s.sides.agent || 0, "harness_*, protocol_error, turn_timeout"),
    card("infra failures", s.sides.infra || 0, "worker_lost, workflow_failed, model_error"),
    card("env errors", s.sides.env || 0),
    priorityCards(priority || {}));
}

// Priority, fairness key, and a batch workflow's status and spending (pages.py's too).
function priorityCards(f) {
  const out = [];
  if (f.priority != null) out.push(card("priority", f.priority, "1 first .. 5 last"));
  if (f.fairness_key) out.push(card("fairness key", f.fairness_key));
  if (f.live != null) {
    out.push(card("live", f.live, `${f.waiting} wait for a box`));
    out.push(card("parked", f.parked || 0, "no box; resume goes on"));
  }
  if (f.status === "budget_exhausted") {
    out.push(card("budget_exhausted", f.budget || "", "no more episodes started"));
  }
  if (f.model_calls) out.push(card("model tokens", f.model_tokens, plural(f.model_calls, "call")));
  if (f.episode_seconds != null) out.push(card("episode time", dur(f.episode_seconds), "summed"));
  if (f.cost) {
    out.push(card("cost", usd(f.cost.model + f.cost.box),
      `${plural(f.priced, "episode")} priced: models ${usd(f.cost.model)}, boxes ${usd(f.cost.box)}`));
  }
  if (f.groups_zero_variance != null) {
    out.push(card("zero-variance groups", f.groups_zero_variance, "no GRPO signal"));
  }
  return out;
}

// The figures with their intervals, over tasks (`intervals`: episodes.evals.summary),
// as pages.py's first view draws them.
function interval(iv) {
  return iv ? `[${num(iv[0], 3)}, ${num(iv[1], 3)}]` : "–";
}

function figures(iv) {
  const rows = [["mean reward", iv.mean_reward],
    [`pass rate (reward ≥ ${iv.threshold}, Wilson)`, iv.pass_rate]];
  for (const [k, e] of Object.entries(iv.pass_at_k)) rows.push([`pass@${k}`, e]);
  for (const [k, e] of Object.entries(iv.pass_hat_k)) if (k !== "1") rows.push([`pass^${k}`, e]);
  return h("table", {}, h("tr", {}, ["", "value", "interval", "standard error"].map((c) => h("th", {}, c))),
    rows.map(([label, e]) => h("tr", {}, h("td", {}, label),
      h("td", { class: "num" }, num(e ? e.value : null, 3)),
      h("td", { class: "num" }, interval(e ? e.interval : null)),
      h("td", { class: "num" }, num(e ? e.standard_error : null, 3)))));
}

function compareForm(s) {
  return h("form", { class: "filters", method: "get", action: "/compare-batches" },
    h("input", { type: "hidden", name: "a", value: batchId }),
    h("input", { type: "hidden", name: "threshold", value: String(s.threshold) }),
    h("label", {}, "compare with batch ", h("input", { name: "b", required: "", size: 32 })), " ",
    h("button", { type: "submit" }, "Compare"));
}

function terminations(s, rows) {
  const sideOf = {};
  for (const r of rows) sideOf[r.termination || "running"] = r.side;
  return h("table", {}, h("tr", {}, h("th", {}, "termination"), h("th", { class: "num" }, "episodes"),
    h("th", {}, "side")),
  Object.entries(s.terminations).map(([t, n]) => h("tr", {},
    h("td", {}, pill(t, sideOf[t])), h("td", { class: "num" }, n),
    h("td", { class: "muted" }, sideOf[t] || ""))));
}

function distributions(s) {
  const r = (x) => num(x, 2);
  const d = s.duration_s, t = s.turns;
  return h("div", { class: "grid3" },
    h("div", {}, h("h2", {}, "Reward"), bars(s.reward_histogram, r)),
    h("div", {}, h("h2", {}, "Duration ", h("span", { class: "muted small" },
      `p50 ${dur(d.p50)} · p90 ${dur(d.p90)} · max ${dur(d.max)}`)), bars(d.histogram, dur)),
    h("div", {}, h("h2", {}, "Turns ", h("span", { class: "muted small" },
      `p50 ${t.p50 ?? "–"} · p90 ${t.p90 ?? "–"} · max ${t.max ?? "–"}`)),
    bars(t.histogram, (x) => String(Math.round(x)))));
}

function groups(s) {
  return h("table", {}, h("tr", {}, h("th", {}, "task"), h("th", { class: "num" }, "passed"),
    h("th", { class: "num" }, "mean"), h("th", {}, "samples: reward (advantage)"), h("th", {}, "")),
  s.groups.map((g) => h("tr", {},
    h("td", {}, g.task), h("td", { class: "num" }, `${g.passed}/${g.done}`),
    h("td", { class: "num" }, num(g.mean_reward)),
    h("td", { class: "wrap" }, h("div", { class: "chips" }, g.samples.map((m) =>
      h("a", { class: "chip" + (m.reward !== null && m.reward >= s.threshold ? " pass" : ""),
        href: link.episode(m.id), title: m.termination || "running" },
      `s${m.sample ?? "?"} ${num(m.reward, 2)} (${signed(m.advantage)})`)))),
    h("td", {}, g.samples.length > 1
      ? h("a", { href: link.compare(g.samples[0].id, g.samples[1].id) }, "compare") : ""))));
}

function episodes(rows) {
  return h("table", {}, h("tr", {}, ["episode", "task", "sample", "outcome", "reward", "advantage",
    "turns", "duration", "started"].map((c) => h("th", {}, c))),
  rows.map((r) => h("tr", { class: r.final === false ? "muted" : null },
    h("td", { class: "mono" }, h("a", { href: link.episode(r.id) }, r.id)),
    h("td", {}, r.task || ""), h("td", { class: "num" }, r.sample ?? ""),
    h("td", {}, outcome(r), r.final === false
      ? h("span", { class: "small", title: "a later attempt replaced it in the figures" }, " replaced") : ""), h("td", { class: "num" }, num(r.reward)),
    h("td", { class: "num" }, signed(r.advantage)), h("td", { class: "num" }, r.turns ?? "–"),
    h("td", { class: "num" }, dur(r.duration_s)), h("td", { class: "muted" }, when(r.start)))));
}

function searchBox() {
  const input = h("input", { name: "q", placeholder: "text in messages, replies, tool and model calls", size: 48 });
  const out = h("div", { id: "hits" });
  const form = h("form", { class: "filters", onsubmit: (e) => { e.preventDefault(); search(input.value, out); } },
    input, h("button", { type: "submit" }, "Search"));
  return h("div", {}, form, out);
}

function highlight(snippet, q) {
  const at = snippet.toLowerCase().indexOf(q.toLowerCase());
  if (at < 0) return snippet;
  return [snippet.slice(0, at), h("mark", {}, snippet.slice(at, at + q.length)), snippet.slice(at + q.length)];
}

async function search(q, out) {
  if (!q) return;
  const status = h("p", { class: "muted small" }, "searching…");
  out.replaceChildren(status);
  const url = new URL("/api/search", location.origin);
  url.searchParams.set("batch", batchId);
  url.searchParams.set("q", q);
  const resp = await fetch(url);
  const reader = resp.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let nl;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const line = JSON.parse(buf.slice(0, nl));
      buf = buf.slice(nl + 1);
      if (line.done) {
        status.textContent = line.error ? "search failed: " + line.error :
          `${plural(line.hits, "hit")} in ${line.scanned} of ${plural(line.episodes, "episode")}` +
          (line.truncated ? " (stopped early: narrow the search)" : "");
        continue;
      }
      out.append(h("div", { class: "hit" },
        h("a", { href: link.episode(line.id) + "#turn-" + line.turn, class: "mono" },
          `${line.id} · turn ${line.turn} · ${line.where}`),
        h("div", { class: "mono small" }, highlight(line.snippet, q))));
    }
  }
}

let search_ui = null;

async function render() {
  const main = document.getElementById("main");
  const data = await api("/api/batch", { id: batchId, threshold });
  const s = data.stats;
  search_ui = search_ui || searchBox();
  main.replaceChildren(
    h("h1", {}, batchId),
    h("div", { class: "muted small" }, `${data.episodes[0]?.env || ""} · pass threshold ${s.threshold}` +
      (data.truncated ? " · showing the first episodes only" : "")),
    cards(s, data.fleet),
    h("h2", {}, "With their noise ", h("span", { class: "muted small" },
      `${Math.round(s.intervals.level * 100)}% intervals, over tasks`)),
    figures(s.intervals), compareForm(s),
    h("div", { class: "grid2" },
      h("div", {}, h("h2", {}, "Terminations"), terminations(s, data.episodes)),
      h("div", {}, h("h2", {}, "Search transcripts"), search_ui)),
    distributions(s),
    h("h2", {}, `Tasks (${s.groups.length})`), groups(s),
    h("h2", {}, `Episodes (${data.episodes.length})`), episodes(data.episodes));
  document.getElementById("live").textContent = s.running
    ? `live: ${s.running} running · updated ${new Date().toLocaleTimeString()}` : "";
  return s.running > 0;
}

async function main() {
  document.title = batchId + " · episodes";
  topbar(h("span", {}, "batch"));
  try {
    if (await render()) poller(render, 3000).start();
  } catch (err) {
    fail(document.getElementById("main"), err);
  }
}

main();
