// `/episode/<workflow id>`: header, outcome, turns (paged), live while it runs.
"use strict";

const wid = pathId("/episode/");
const PAGE = 50;
let have = 0;      // turns shown
let total = 0;     // turns the history holds (for a closed episode: all of them)
let marks = restartMarks([]);

// Usage as the upstream reported it and the cost under the spec's prices (pages.py's too).
function usageText(u) {
  return `${plural(u.calls, "call")}: ${u.input_tokens} in` +
    (u.cached_tokens ? ` (${u.cached_tokens} cached)` : "") + `, ${u.output_tokens} out` +
    (u.reasoning_tokens ? ` (${u.reasoning_tokens} reasoning)` : "");
}

function costText(c) {
  return `${usd(c.model + c.box)} (models ${usd(c.model)}, boxes ${usd(c.box)})` +
    (c.unpriced.length ? `; no price for ${c.unpriced.join(", ")}` : "");
}

function header(d) {
  const e = d.episode;
  const r = d.result;
  const title = h("div", {},
    h("h1", { class: "mono" }, wid),
    h("div", { class: "row" }, outcome(e),
      e.reward !== null ? h("span", {}, "reward ", h("b", {}, num(e.reward))) : "",
      h("span", { id: "turn-count" }, plural(e.turns ?? d.total_turns, "turn")),
      episodeDuration(d) !== null ? h("span", { class: "muted" }, dur(episodeDuration(d))) : "",
      e.batch ? h("a", { href: link.batch(e.batch) }, "batch " + e.batch) : "",
      h("span", { class: "muted" }, `task ${e.task || "?"} · sample ${e.sample ?? "?"} · ${e.env || ""}`),
      h("a", { href: d.ui_url, target: "_blank", rel: "noopener" }, "Temporal UI ↗")));
  const parts = [title];
  if (d.undecodable.length) {
    parts.push(h("div", { class: "banner" }, `encrypted: ${d.undecodable.length} payload(s) could not be ` +
      `decoded (${d.undecodable[0].error}). Start the viewer with the workers' payload keys to read them.`));
  }
  if (r) {
    const kv = h("dl", { class: "kv" },
      h("dt", {}, "termination"), h("dd", {}, pill(r.termination, e.side)),
      h("dt", {}, "reward"), h("dd", {}, num(r.reward)));
    if (r.restarts) {
      kv.append(h("dt", {}, "restarts"), h("dd", {}, `${r.restarts} (turns replayed ${r.turns_replayed}, ` +
        `diverged ${r.replay_divergences}, re-run ${r.turns_rerun})`));
    }
    if (r.pool_hit !== null) kv.append(h("dt", {}, "pooled box"), h("dd", {}, r.pool_hit ? "hit" : "miss"));
    for (const [m, u] of Object.entries(r.usage || {})) {
      kv.append(h("dt", {}, `model ${m}`), h("dd", {}, usageText(u)));
    }
    if (r.cost) kv.append(h("dt", {}, "cost"), h("dd", {}, costText(r.cost)));
    parts.push(h("h2", {}, "Outcome"), kv);
    if (r.error.message) parts.push(h("div", { class: "who" }, "error"), block(r.error.message, "error"));
    if (r.error.stderr) parts.push(h("div", { class: "who" }, "harness stderr (tail)"), block(r.error.stderr, "error"));
    if (r.score_details && Object.keys(r.score_details).length) {
      parts.push(h("div", { class: "who" }, "score details"), block(r.score_details));
    }
  }
  if (d.task) {
    parts.push(h("details", {}, h("summary", { class: "small muted" }, "task data"), block(d.task)));
  }
  return parts;
}

function appendTurns(list, turns) {
  for (const t of turns) {
    if (t.turn < have) continue;
    for (const note of marks.before(t.turn)) list.append(restartNote(note));
    list.append(turnView(wid, t, marks));
    have = t.turn + 1;
  }
}

async function loadMore(list, more) {
  more.disabled = true;
  const d = await api("/api/episode", { id: wid, offset: have, limit: PAGE });
  total = d.total_turns;
  appendTurns(list, d.turns);
  updateMore(more);
}

function updateMore(more) {
  more.disabled = false;
  more.hidden = have >= total;
  more.textContent = `Show ${Math.min(PAGE, total - have)} more turns (${have} of ${total} shown)`;
}

async function main() {
  document.title = wid + " · episodes";
  const main = document.getElementById("main");
  topbar(h("span", {}, "episode"));
  let d;
  try {
    d = await api("/api/episode", { id: wid, limit: PAGE });
  } catch (err) {
    return fail(main, err);
  }
  total = d.total_turns;
  marks = restartMarks(d.restarts || []);
  const list = h("div", { id: "turns" });
  const more = h("button", { class: "more", id: "more", onclick: () => loadMore(list, more) });
  main.replaceChildren(...header(d), h("h2", {}, "Conversation"));
  if (!d.turns.length && d.first_message !== null) {
    main.append(h("div", { class: "who" }, "first message"), block(d.first_message));
  }
  main.append(list, more);
  appendTurns(list, d.turns);
  updateMore(more);
  // Long episodes page in as the reader nears the end.
  new IntersectionObserver((entries) => {
    if (entries[0].isIntersecting && !more.hidden && !more.disabled) loadMore(list, more);
  }).observe(more);
  if (d.episode.status === "running") follow(list, more);
  // A search hit's link names its turn: page up to it (also when only the hash changes).
  const goTo = async () => {
    const hit = location.hash.match(/^#turn-(\d+)$/);
    if (!hit) return;
    while (have <= +hit[1] && have < total) await loadMore(list, more);
    document.getElementById("turn-" + hit[1])?.scrollIntoView();
  };
  window.addEventListener("hashchange", goTo);
  await goTo();
}

// A running episode: poll the `progress` query for turns after the last one shown.
function follow(list, more) {
  const live = document.getElementById("live");
  poller(async () => {
    if (have < total) return true;  // the reader is still paging through history
    const p = await api("/api/progress", { id: wid, since: have });
    if (p.closed) {
      live.textContent = "finished — reloading";
      location.reload();
      return false;
    }
    appendTurns(list, p.turns);
    total = Math.max(total, have);
    updateMore(more);
    const count = document.getElementById("turn-count");
    if (count && p.turns_done !== undefined) count.textContent = plural(p.turns_done, "turn");
    live.textContent = `live: ${p.status || "waiting"} · turn ${p.turns_done ?? have}` +
      (p.max_turns ? `/${p.max_turns}` : "") + ` · ${new Date().toLocaleTimeString()}`;
    return true;
  }, 1000).start();
}

main();
