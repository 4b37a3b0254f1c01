// Turns as a conversation: messages, replies, tool calls, model calls (tokens colored
// by logprob), harness events. Clipped parts carry a "load full" link.
"use strict";

function block(value, cls) {
  return h("pre", { class: cls || "" }, text(value));
}

// A clipped part: its list-view value plus a link that swaps in the whole value.
function loadFull(wid, turn, part, size, rerender) {
  const a = h("a", { href: "#", class: "clipped" }, `load full (${bytes(size)})`);
  a.addEventListener("click", async (e) => {
    e.preventDefault();
    a.textContent = "loading…";
    try {
      const data = await api("/api/part", { id: wid, turn, part });
      a.replaceWith(h("span", { class: "muted small" }, "full value"));
      rerender(data.value);
    } catch (err) {
      a.textContent = "failed: " + err.message;
    }
  });
  return h("div", {}, h("span", { class: "muted small" }, "clipped for the list · "), a);
}

function tokens(content) {
  return h("div", { class: "tokens" }, content.map((t) => {
    if (typeof t === "string") return h("span", { class: "muted" }, ` ${t} `);
    const lp = typeof t.logprob === "number" ? t.logprob : -99;
    const p = Math.exp(lp);
    const alpha = Math.min(0.75, (1 - p) * 0.8).toFixed(2);
    return h("span", { style: `background:rgba(255,80,60,${alpha})`,
      title: `logprob ${typeof t.logprob === "number" ? t.logprob.toFixed(3) : t.logprob} · p ${p.toFixed(3)}` },
    t.token);
  }));
}

function chatMessage(m) {
  if (typeof m === "string") return h("div", { class: "muted small" }, m);
  const role = m.role || "?";
  const calls = (m.tool_calls || []).map((c) => `${c.function?.name}(${c.function?.arguments})`);
  const body = [m.content !== null && m.content !== undefined ? text(m.content) : "", ...calls].filter(Boolean).join("\n");
  return h("div", {}, h("div", { class: "who" }, role + (m.name ? " · " + m.name : "")),
    block(body));
}

function modelCall(ev) {
  const req = ev.request || {};
  const resp = ev.response && typeof ev.response === "object" ? ev.response : {};
  const choice = (resp.choices || [])[0] || {};
  const msg = choice.message || {};
  const usage = ev.usage || {};
  const calls = (msg.tool_calls || []).map((c) => `${c.function?.name}(${c.function?.arguments})`);
  const said = msg.content ? text(msg.content) : "";
  const summary = [h("span", { class: "kind model" }, "model"), " ", req.model || "",
    " · ", `${usage.prompt_tokens ?? "?"}+${usage.completion_tokens ?? "?"} tokens`,
    " · ", ms(ev.ms)];
  if (ev.status && ev.status !== 200) summary.push(" · ", pill("HTTP " + ev.status, "agent"));
  if (ev.attempts > 1) summary.push(" · ", `${ev.attempts} attempts`);
  summary.push(h("span", { class: "muted" }, " — " + (calls.length ? "calls " + calls.join(", ") : said).slice(0, 120)));
  const messages = req.messages || [];
  const logprobs = choice.logprobs && Array.isArray(choice.logprobs.content) ? choice.logprobs.content : null;
  const body = h("div", { class: "body" },
    h("details", {}, h("summary", { class: "small muted" }, `request: ${plural(messages.length, "message")}`),
      messages.map(chatMessage)),
    h("div", { class: "who" }, "sampled"),
    logprobs && logprobs.length ? tokens(logprobs) : block(said || "(no text)"),
    calls.length ? block(calls.join("\n")) : "",
    ev.error ? block(ev.error, "error") : "");
  return [summary, body];
}

function toolCall(ev) {
  const args = JSON.stringify(ev.arguments || {});
  const outcome = "error" in ev ? h("span", { class: "pill agent" }, "error") : "";
  const summary = [h("span", { class: "kind tool" }, "tool"), " ", h("span", { class: "mono" },
    `${ev.name}(${args.length > 100 ? args.slice(0, 100) + "…" : args})`), " ", outcome, " · ", ms(ev.ms)];
  const body = h("div", { class: "body" },
    h("div", { class: "who" }, "arguments"), block(ev.arguments),
    h("div", { class: "who" }, "error" in ev ? "error" : "result"),
    block("error" in ev ? ev.error : ev.result, "error" in ev ? "error" : ""));
  return [summary, body];
}

function eventView(ev) {
  const kind = ev && typeof ev === "object" ? ev.kind : null;
  const [summary, body] = kind === "model_call" ? modelCall(ev) : kind === "tool_call" ? toolCall(ev)
    : [[h("span", { class: "kind harness" }, kind || "event"), " ",
      h("span", { class: "muted mono" }, text(ev).replace(/\s+/g, " ").slice(0, 140))],
    h("div", { class: "body" }, block(ev))];
  return h("details", { class: "event" }, h("summary", {}, summary), body);
}

// One row of a turn: who (env, harness) in the margin, what beside it.
function line(who, content) {
  return h("div", { class: "line" }, h("div", { class: "who" }, who), content);
}

// A part of a turn, with its "load full" link when it was clipped.
function part(wid, t, name, build) {
  const size = t.clipped && t.clipped[name];
  const box = h("div", {}, build(name.startsWith("events.") ? t.events[+name.slice(7)] : t[name]));
  if (size) box.append(loadFull(wid, t.turn, name, size, (v) => box.firstChild.replaceWith(build(v))));
  return box;
}

function turnView(wid, t, marks) {
  const replayed = marks && marks.replayed(t.turn);
  const el = h("section", { class: "turn" + (t.error_type ? " failed" : "") + (replayed ? " replayed" : ""),
    id: "turn-" + t.turn });
  if (t.undecodable) {
    el.append(h("div", { class: "head" }, h("b", {}, `Turn ${t.turn}`)),
      h("div", { class: "banner" }, "encrypted: this viewer has no key for this turn's payload"));
    return el;
  }
  const head = h("div", { class: "head" }, h("b", {}, `Turn ${t.turn}`), ms(t.duration_ms));
  if (replayed) head.append(pill("replayed", "infra"));
  if (marks && marks.diverged(t.turn)) head.append(pill("diverged on replay", "env"));
  if (t.termination) head.append(pill(t.termination, t.error_type ? "agent" : "ok"));
  el.append(head, line("env", part(wid, t, "message", (v) => block(v))));
  t.events.forEach((_, i) => el.append(line("", part(wid, t, "events." + i, eventView))));
  if (t.error || t.error_type) {
    el.append(line(t.error_type || "error", part(wid, t, "error", (v) => block(v, "error"))));
  } else {
    el.append(line("harness", h("div", { class: "reply" }, part(wid, t, "reply", (v) => block(v)))));
  }
  const obs = t.observation;
  if (obs && (obs.done || obs.reward !== null && obs.reward !== undefined)) {
    el.append(line("", h("div", { class: "small muted" }, `env: ${obs.done ? "done" : "continue"}` +
      (obs.reward !== null && obs.reward !== undefined ? ` · reward ${num(obs.reward)}` : ""))));
  }
  return el;
}

// Which turns were replayed into a restored session, and where the restarts fall.
function restartMarks(restarts) {
  const last = restarts.length ? Math.max(...restarts.map((r) => r.turns_replayed || 0)) : 0;
  const diverged = new Set(restarts.flatMap((r) => r.divergent_turns || []));
  return {
    replayed: (n) => n < last,
    diverged: (n) => diverged.has(n),
    before: (n) => restarts.map((r, i) => [r, i]).filter(([r]) => (r.turns_replayed || 0) === n),
  };
}

function restartNote([r, i]) {
  return h("div", { class: "restart" }, `↻ restart ${i + 1}: the worker was lost; a new session ` +
    `on ${r.session?.worker_id || "another worker"} had turns 0–${(r.turns_replayed || 1) - 1} replayed` +
    (r.divergences ? ` (${r.divergences === 1 ? "1 reply" : `${r.divergences} replies`} differed)` : "") + (r.resumed ? " in one resume packet" : ""));
}
