"""The rating page: one HTML shell, one stylesheet, one script (no build step, no CDN).

The script loads ``/r/<token>/state`` (texts, opaque ids, the rater's own ratings), shows one
query at a time with its suggestions, and posts each rating at once to ``/r/<token>/rate``.
Requests go out one at a time in click order, each with a random event id, and a failed one is
retried every 1.5 s until the server has it (so a rating clicked while the server is down is
stored when it comes back; leaving the page with unsaved ratings asks first).

Keys: 1-4 rate the highlighted suggestion (then the highlight moves to the next unrated one),
Up/Down or k/j move the highlight, Enter or Right go to the next query, Left to the previous.
"""

HTML = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>Relevance study</title>
<link rel="stylesheet" href="/static/study.css">
</head>
<body data-ready="0" data-pending="0" data-rated="0" data-total="0">
<header>
  <h1>Relevance study</h1>
  <span id="rater"></span>
  <div id="progress" aria-label="progress">
    <div class="bar"><div id="bar-fill"></div></div>
    <span id="progress-text">loading…</span>
  </div>
  <span id="save-status" role="status" aria-live="polite"></span>
</header>
<div id="done" hidden></div>
<main id="app"><p class="loading">Loading…</p></main>
<footer id="help">
  <kbd>1</kbd>–<kbd>4</kbd> rate the highlighted suggestion ·
  <kbd>↑</kbd> <kbd>↓</kbd> (<kbd>k</kbd> <kbd>j</kbd>) move ·
  <kbd>Enter</kbd> / <kbd>→</kbd> next query · <kbd>←</kbd> previous query
</footer>
<script src="/static/study.js"></script>
</body>
</html>
"""

CSS = """
:root { --accent: #2458d6; --ok: #1b7f3b; --warn: #b25e00; --bad: #b3261e; --line: #d9dde5; }
* { box-sizing: border-box; }
body { margin: 0; font: 16px/1.45 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif;
       color: #1d2330; background: #f5f6f9; }
header { position: sticky; top: 0; z-index: 2; display: flex; align-items: center; gap: 1.2rem;
         height: 3rem; padding: 0 1.5rem; background: #fff; border-bottom: 1px solid var(--line); }
header h1 { font-size: 1.1rem; margin: 0; }
#rater { color: #5b6475; }
#progress { display: flex; align-items: center; gap: .6rem; flex: 1; }
.bar { flex: 1; max-width: 360px; height: 10px; background: #e6e9f0; border-radius: 5px; overflow: hidden; }
#bar-fill { height: 100%; width: 0; background: var(--accent); transition: width .2s; }
#progress-text { font-variant-numeric: tabular-nums; white-space: nowrap; }
#save-status { min-width: 10rem; text-align: right; color: var(--ok); }
#save-status.pending { color: var(--warn); }
#save-status.error { color: var(--bad); font-weight: 600; }
main { max-width: 1040px; margin: .6rem auto 4rem; padding: 0 1rem; }
#done { max-width: 1040px; margin: 1rem auto 0; padding: .8rem 1rem; border-radius: 8px;
        background: #e3f4e8; color: #124d25; font-weight: 600; }
.query { position: sticky; top: 3rem; z-index: 1; display: flex; gap: 1rem; align-items: center;
         padding: .8rem 1.2rem; background: #fff; border: 1px solid var(--line); border-radius: 10px;
         box-shadow: 0 4px 10px rgba(29,35,48,.06); }
.query .label { font-size: .8rem; text-transform: uppercase; letter-spacing: .06em; color: #5b6475; }
.query .qtext { font-size: 1.35rem; font-weight: 600; margin: .1rem 0 0; }
.query img { width: 72px; height: 72px; object-fit: contain; }
.instr { margin: 1rem 0 .5rem; color: #3d4556; }
ol.suggestions { list-style: none; margin: 0; padding: 0; }
.sugg { display: grid; grid-template-columns: 2rem 56px minmax(0, 1fr) 5rem;
        grid-template-areas: "num img text state" "num img scale state"; align-items: center; gap: .3rem .8rem;
        padding: .5rem .8rem; margin: .4rem 0; background: #fff; border: 2px solid transparent;
        border-radius: 8px; box-shadow: 0 0 0 1px var(--line); cursor: pointer;
        scroll-margin-top: 12rem; scroll-margin-bottom: 4rem; }
.sugg .num { grid-area: num; } .sugg > img, .sugg > .noimg { grid-area: img; } .sugg .stext { grid-area: text; }
.sugg .scale { grid-area: scale; } .sugg .state { grid-area: state; }
.sugg.focus { border-color: var(--accent); box-shadow: 0 0 0 3px rgba(36,88,214,.15); }
.sugg .num { color: #8a93a6; font-variant-numeric: tabular-nums; text-align: right; }
.sugg img { width: 48px; height: 48px; object-fit: contain; }
.sugg .stext { overflow-wrap: anywhere; }
.scale { display: flex; gap: .3rem; }
.scale button { font: inherit; font-size: .85rem; padding: .3rem .55rem; border: 1px solid #b9c0cf;
                border-radius: 6px; background: #fff; cursor: pointer; white-space: nowrap; }
.scale button b { margin-right: .25rem; }
.scale button:hover { border-color: var(--accent); }
.scale button.sel { background: var(--accent); border-color: var(--accent); color: #fff; }
.scale button.sel[data-score="4"] { background: #5b6475; border-color: #5b6475; }
.state { font-size: .8rem; color: #8a93a6; text-align: right; }
.sugg[data-state="saved"] .state { color: var(--ok); }
.sugg[data-state="pending"] .state { color: var(--warn); }
nav { display: flex; justify-content: space-between; align-items: center; margin-top: 1rem; }
nav button { font: inherit; padding: .45rem 1rem; border-radius: 6px; border: 1px solid #b9c0cf; background: #fff; cursor: pointer; }
nav button.ready { background: var(--accent); color: #fff; border-color: var(--accent); }
nav .where { color: #5b6475; }
footer { position: fixed; bottom: 0; left: 0; right: 0; padding: .45rem 1.5rem; background: #fff;
         border-top: 1px solid var(--line); color: #5b6475; font-size: .9rem; }
kbd { font: .8rem ui-monospace, monospace; padding: .05rem .35rem; border: 1px solid #b9c0cf;
      border-bottom-width: 2px; border-radius: 4px; background: #fafbfc; }
.error-box { padding: 1rem; background: #fdecea; color: var(--bad); border-radius: 8px; }
@media (max-width: 760px) {
  .sugg { grid-template-columns: 1.5rem 40px minmax(0, 1fr); grid-template-areas: "num img text" "scale scale scale" "state state state"; }
  .scale { flex-wrap: wrap; }
  .state { text-align: left; }
}
"""

JS = r"""
"use strict";
(function () {
  const base = location.pathname.replace(/\/+$/, "");
  const S = { data: null, q: 0, focus: 0, ratings: {}, saved: {}, queue: [], inflight: false, failing: false };
  const $ = (sel, el) => (el || document).querySelector(sel);

  function eventId() {
    const a = new Uint8Array(12); crypto.getRandomValues(a);
    return Array.from(a, b => b.toString(16).padStart(2, "0")).join("");
  }
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v; else if (k === "text") e.textContent = v; else e.setAttribute(k, v);
    }
    for (const k of kids) if (k) e.appendChild(k);
    return e;
  }
  const img = id => id ? el("img", { src: base + "/img/" + id, alt: "" }) : null;
  const query = () => S.data.queries[S.q];
  const unrated = q => q.suggestions.filter(s => !(s.sid in S.ratings)).length;

  function pendingCount() { return S.queue.length + (S.inflight ? 1 : 0); }
  function savedCount() { return Object.keys(S.saved).length; }

  function updateHeader() {
    const total = S.data.total, rated = savedCount();
    $("#bar-fill").style.width = (total ? 100 * rated / total : 0) + "%";
    $("#progress-text").textContent = rated + " / " + total + " rated · query " + (S.q + 1) + " of " + S.data.queries.length;
    const st = $("#save-status"), n = pendingCount();
    st.className = S.failing ? "error" : (n ? "pending" : "");
    st.textContent = S.failing ? "Server unreachable – retrying (" + n + " unsaved)" : (n ? "Saving…" : "All ratings saved");
    document.body.dataset.pending = String(n);
    document.body.dataset.rated = String(rated);
    document.body.dataset.total = String(total);
    document.body.dataset.query = String(S.q);
    const done = $("#done");
    if (rated === total && n === 0 && total > 0) {
      done.hidden = false;
      done.textContent = "All " + total + " suggestions rated and saved – thank you! You can still go back and change a rating.";
    } else done.hidden = true;
  }

  function rowState(sid) {
    if (!(sid in S.ratings)) return "todo";
    return S.saved[sid] === S.ratings[sid] ? "saved" : "pending";
  }
  function updateRow(li) {
    const sid = li.dataset.sid, sc = S.ratings[sid];
    li.dataset.score = sc ? String(sc) : "";
    li.dataset.state = rowState(sid);
    for (const b of li.querySelectorAll(".scale button")) b.classList.toggle("sel", Number(b.dataset.score) === sc);
    $(".state", li).textContent = { todo: "", saved: "✓ saved", pending: "saving…" }[li.dataset.state];
  }
  function updateFocus() {
    const rows = document.querySelectorAll(".sugg");
    rows.forEach((li, i) => { li.classList.toggle("focus", i === S.focus); li.setAttribute("aria-current", i === S.focus ? "true" : "false"); });
    const cur = rows[S.focus];
    if (cur) cur.scrollIntoView({ block: "nearest" });
    const next = $("#next");
    if (next) next.classList.toggle("ready", unrated(query()) === 0);
  }

  function render() {
    const q = query(), app = $("#app");
    app.textContent = "";
    app.appendChild(el("section", { class: "query", "data-qid": q.qid }, img(q.image),
      el("div", {}, el("div", { class: "label", text: "Query " + (S.q + 1) + " of " + S.data.queries.length + " (" + S.data.src_lang + ")" }),
        el("p", { class: "qtext", text: q.text }))));
    app.appendChild(el("p", { class: "instr", text: "How relevant is each suggestion (" + S.data.tgt_lang + ") to this query?" }));
    const ol = el("ol", { class: "suggestions" });
    q.suggestions.forEach((s, i) => {
      const scale = el("div", { class: "scale" });
      for (const o of S.data.scale) {
        const b = el("button", { type: "button", "data-score": String(o.score), tabindex: "-1", title: o.label },
          el("b", { text: String(o.score) }), document.createTextNode(o.label));
        b.addEventListener("click", ev => { ev.stopPropagation(); S.focus = i; rate(o.score); });
        scale.appendChild(b);
      }
      const li = el("li", { class: "sugg", "data-sid": s.sid }, el("span", { class: "num", text: String(i + 1) }),
        img(s.image) || el("span", { class: "noimg" }), el("span", { class: "stext", text: s.text }), scale, el("span", { class: "state" }));
      li.addEventListener("click", () => { S.focus = i; updateFocus(); });
      updateRow(li);
      ol.appendChild(li);
    });
    app.appendChild(ol);
    const prev = el("button", { id: "prev", type: "button", text: "← Previous query" });
    const next = el("button", { id: "next", type: "button", text: "Next query →" });
    prev.disabled = S.q === 0;
    prev.addEventListener("click", () => go(S.q - 1));
    next.addEventListener("click", () => go(S.q + 1));
    app.appendChild(el("nav", {}, prev, el("span", { class: "where", text: unrated(q) ? unrated(q) + " left in this query" : "query complete" }), next));
    updateFocus();
    updateHeader();
  }

  function firstUnrated(q) {
    const i = q.suggestions.findIndex(s => !(s.sid in S.ratings));
    return i < 0 ? 0 : i;
  }
  function go(i) {
    const n = S.data.queries.length;
    if (i >= n) {  // past the end: the first query with something left, else stay
      const j = S.data.queries.findIndex(q => unrated(q) > 0);
      if (j < 0) { updateHeader(); return; }
      i = j;
    }
    if (i < 0) return;
    S.q = i; S.focus = firstUnrated(query());
    render();
    window.scrollTo(0, 0);
  }

  function rate(score) {
    const q = query(), s = q.suggestions[S.focus];
    if (!s) return;
    S.ratings[s.sid] = score;
    S.queue = S.queue.filter(x => x.sid !== s.sid);
    S.queue.push({ sid: s.sid, score: score, event: eventId() });
    const li = document.querySelector('.sugg[data-sid="' + s.sid + '"]');
    if (li) updateRow(li);
    // next unrated suggestion after this one (wrapping), else stay
    const m = q.suggestions.length;
    for (let k = 1; k <= m; k++) {
      const j = (S.focus + k) % m;
      if (!(q.suggestions[j].sid in S.ratings)) { S.focus = j; break; }
    }
    const where = $("nav .where");
    if (where) where.textContent = unrated(q) ? unrated(q) + " left in this query" : "query complete – Enter for the next";
    updateFocus();
    updateHeader();
    pump();
  }

  async function pump() {
    if (S.inflight || !S.queue.length) return;
    const item = S.queue.shift();
    S.inflight = true;
    let retry = false;
    try {
      const r = await fetch(base + "/rate", { method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify(item), cache: "no-store" });
      if (r.ok) {
        S.failing = false;
        S.saved[item.sid] = item.score;
      } else if (r.status >= 400 && r.status < 500) {
        S.failing = false;
        const j = await r.json().catch(() => ({}));
        showError("Rating not accepted: " + (j.error || r.status));
        if (S.ratings[item.sid] === item.score) {  // undo the optimistic change
          if (item.sid in S.saved) S.ratings[item.sid] = S.saved[item.sid]; else delete S.ratings[item.sid];
        }
      } else retry = true;
    } catch (e) { retry = true; }
    S.inflight = false;
    if (retry) {
      S.failing = true;
      if (!S.queue.some(x => x.sid === item.sid)) S.queue.unshift(item);  // same event id: stored once
      setTimeout(pump, 1500);
    }
    const li = document.querySelector('.sugg[data-sid="' + item.sid + '"]');
    if (li) updateRow(li);
    updateHeader();
    if (!retry) pump();
  }

  function showError(msg) {
    const st = $("#save-status"); st.className = "error"; st.textContent = msg;
  }

  document.addEventListener("keydown", ev => {
    if (!S.data || ev.ctrlKey || ev.metaKey || ev.altKey) return;
    const n = query().suggestions.length;
    if (["1", "2", "3", "4"].includes(ev.key)) { rate(Number(ev.key)); ev.preventDefault(); }
    else if (ev.key === "ArrowDown" || ev.key === "j") { S.focus = Math.min(n - 1, S.focus + 1); updateFocus(); ev.preventDefault(); }
    else if (ev.key === "ArrowUp" || ev.key === "k") { S.focus = Math.max(0, S.focus - 1); updateFocus(); ev.preventDefault(); }
    else if (ev.key === "Enter" || ev.key === "ArrowRight") { go(S.q + 1); ev.preventDefault(); }
    else if (ev.key === "ArrowLeft") { go(S.q - 1); ev.preventDefault(); }
  });
  window.addEventListener("beforeunload", ev => { if (pendingCount()) { ev.preventDefault(); ev.returnValue = ""; } });

  async function load() {
    try {
      const r = await fetch(base + "/state", { cache: "no-store" });
      if (!r.ok) throw new Error(r.status === 404 ? "This link is not valid." : "Server error " + r.status);
      S.data = await r.json();
    } catch (e) {
      $("#app").textContent = "";
      $("#app").appendChild(el("p", { class: "error-box", text: "Could not load the study: " + e.message }));
      return;
    }
    S.ratings = Object.assign({}, S.data.ratings);
    S.saved = Object.assign({}, S.data.ratings);
    $("#rater").textContent = "rater: " + S.data.rater;
    const j = S.data.queries.findIndex(q => unrated(q) > 0);  // resume where the rater left off
    S.q = j < 0 ? 0 : j;
    S.focus = firstUnrated(query());
    render();
    document.body.dataset.ready = "1";
  }
  load();
})();
"""
