// `/`: batches (distinct EpisodeBatch values), and episodes matching a search.
"use strict";

const FIELDS = [
  ["batch", "batch", "text"], ["env", "env", "text"], ["task", "task", "text"],
  ["termination", "termination", "text"], ["reward_min", "reward ≥", "number"],
  ["reward_max", "reward ≤", "number"], ["since", "started after", "text"],
  ["until", "started before", "text"],
];

function filtersForm(params) {
  const form = h("form", { class: "filters", method: "get", action: "/" });
  for (const [name, label, type] of FIELDS) {
    form.append(h("label", {}, label, h("input", {
      name, type, step: type === "number" ? "any" : null, value: params.get(name) || "",
      placeholder: name === "since" || name === "until" ? "2025-01-31T12:00" : "",
      size: type === "text" ? 14 : null,
    })));
  }
  const status = h("select", { name: "status" },
    ["", "running", "closed"].map((v) => h("option", { value: v, selected: params.get("status") === v }, v || "any")));
  form.append(h("label", {}, "status", status), h("button", { type: "submit" }, "Search"));
  if ([...params.keys()].length) form.append(h("a", { href: "/", class: "small" }, "clear"));
  return form;
}

function batchesTable(data) {
  const rows = data.batches.map((b) => h("tr", {},
    h("td", {}, h("a", { href: link.batch(b.batch) }, b.batch)),
    h("td", {}, b.env || ""),
    h("td", { class: "num" }, b.episodes),
    h("td", { class: "num" }, b.running ? pill(b.running + " running", "running") : ""),
    h("td", { class: "num" }, num(b.mean_reward)),
    h("td", { class: "muted" }, when(b.first_start)),
    h("td", { class: "muted" }, when(b.last_start))));
  return h("table", {}, h("tr", {}, h("th", {}, "batch"), h("th", {}, "env"),
    h("th", { class: "num" }, "episodes"), h("th", { class: "num" }, ""),
    h("th", { class: "num" }, "mean reward"), h("th", {}, "first started"),
    h("th", {}, "last started")), rows);
}

function episodesTable(rows) {
  return h("table", {}, h("tr", {}, ["episode", "batch", "task", "outcome", "reward", "turns",
    "duration", "started"].map((c) => h("th", {}, c))),
  rows.map((r) => h("tr", {},
    h("td", { class: "mono" }, h("a", { href: link.episode(r.id) }, r.id)),
    h("td", {}, r.batch ? h("a", { href: link.batch(r.batch) }, r.batch) : ""),
    h("td", {}, r.task || ""), h("td", {}, outcome(r)),
    h("td", { class: "num" }, num(r.reward)), h("td", { class: "num" }, r.turns ?? "–"),
    h("td", { class: "num" }, dur(r.duration_s)), h("td", { class: "muted" }, when(r.start)))));
}

async function main() {
  const main = document.getElementById("main");
  topbar();
  const params = new URLSearchParams(location.search);
  const query = Object.fromEntries(params.entries());
  // The server's first view stays until this page's own is ready.
  const box = h("div", { id: "batches" });
  try {
    const data = await api("/api/batches", query);
    box.replaceChildren(
      h("p", { class: "muted small" }, `${plural(data.batches.length, "batch")} in the latest ` +
        `${plural(data.scanned, "episode")}${data.truncated ? " (more exist: narrow the search)" : ""}`),
      data.batches.length ? batchesTable(data) : h("p", {}, "No episodes match."));
    if ([...params.keys()].some((k) => params.get(k))) {
      const eps = await api("/api/episodes", { ...query, limit: 200 });
      box.append(h("h2", {}, "Episodes"),
        h("p", { class: "muted small mono" }, eps.query),
        episodesTable(eps.episodes),
        eps.truncated ? h("p", { class: "muted small" }, "first 200 shown") : "");
    }
  } catch (err) {
    fail(box, err);
  }
  main.replaceChildren(h("h1", {}, "Batches"), filtersForm(params), box);
}

main();
