// `/compare?a=<id>&b=<id>`: two samples of one task side by side, turn by turn.
"use strict";

const params = new URLSearchParams(location.search);
const ids = [params.get("a"), params.get("b")];
const TURNS = 100;

function column(id, d) {
  const e = d.episode;
  const marks = restartMarks(d.restarts || []);
  return h("div", {},
    h("h2", { class: "mono" }, h("a", { href: link.episode(id) }, id)),
    h("div", { class: "row" }, outcome(e), `reward ${num(e.reward)}`, plural(d.total_turns, "turn"),
      h("span", { class: "muted" }, dur(episodeDuration(d)))),
    d.turns.map((t) => turnView(id, t, marks)),
    d.total_turns > d.turns.length
      ? h("p", {}, h("a", { href: link.episode(id) + "#turn-" + d.turns.length },
        `${d.total_turns - d.turns.length} more turns on the episode page`)) : "");
}

async function main() {
  const main = document.getElementById("main");
  topbar(h("span", {}, "compare"));
  if (!ids[0] || !ids[1]) {
    return fail(main, new Error("compare needs two episodes: /compare?a=<workflow id>&b=<workflow id>"));
  }
  try {
    const [a, b] = await Promise.all(ids.map((id) => api("/api/episode", { id, limit: TURNS })));
    const task = a.episode.task === b.episode.task ? `task ${a.episode.task}` : "different tasks";
    main.replaceChildren(h("h1", {}, `Compare · ${task}`),
      h("div", { class: "cols" }, column(ids[0], a), column(ids[1], b)));
  } catch (err) {
    fail(main, err);
  }
}

main();
