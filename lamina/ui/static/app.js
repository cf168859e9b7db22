// Lamina explorer: a read-only page over the JSON API (docs/ui.md). No library, nothing
// fetched from elsewhere; plots are small hand-written SVG. Data goes into the page as text
// nodes only (never as HTML), so a table's names and values cannot inject markup.
"use strict";

const SVGNS = "http://www.w3.org/2000/svg";
const main = document.getElementById("main");
const crumbs = document.getElementById("crumbs");

// ---- helpers ---------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    e.appendChild(typeof c === "object" ? c : document.createTextNode(String(c)));
  }
  return e;
}

function svg(tag, attrs, ...children) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) e.setAttribute(k, v);
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    e.appendChild(typeof c === "object" ? c : document.createTextNode(String(c)));
  }
  return e;
}

const nf = new Intl.NumberFormat("en-US");
function num(n) { return n === null || n === undefined ? "–" : nf.format(n); }
function bytes(n) {
  if (n === null || n === undefined) return "–";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0; let x = n;
  while (x >= 1024 && i < u.length - 1) { x /= 1024; i++; }
  return (i ? x.toFixed(1) : String(x)) + " " + u[i];
}
function short(n) {
  const a = Math.abs(n);
  if (a >= 1e9) return (n / 1e9).toFixed(1) + "G";
  if (a >= 1e6) return (n / 1e6).toFixed(1) + "M";
  if (a >= 1e3) return (n / 1e3).toFixed(1) + "k";
  return String(Math.round(n * 100) / 100);
}
function when(ms) { return ms === null || ms === undefined ? "–" : new Date(ms).toISOString().replace("T", " ").slice(0, 19) + "Z"; }

async function api(path) {
  const r = await fetch("/api/" + path, { headers: { Accept: "application/json" } });
  const doc = await r.json();
  if (!r.ok) throw new Error(doc.error || ("HTTP " + r.status));
  return doc;
}

function fail(where, e) {
  where.replaceChildren(el("p", { class: "err" }, String(e.message || e)));
}

function dataTable(columns, rows, opts) {
  // columns: [label, (row) -> value, numeric?]
  const head = el("tr", {}, columns.map(([label, , n]) => el("th", { class: n ? "n" : null }, label)));
  const body = rows.map((r) => el("tr", {}, columns.map(([, f, n]) => {
    const v = f(r);
    return el("td", { class: n ? "n" : null }, v);
  })));
  return el("div", { class: (opts && opts.scroll) ? "scroll" : null }, el("table", { class: "data" }, el("thead", {}, head), el("tbody", {}, body)));
}

// ---- plots -----------------------------------------------------------------------------

const W = 640, H = 220, PAD = { l: 52, r: 12, t: 14, b: 34 };

function frame(name, title) {
  const s = svg("svg", { viewBox: `0 0 ${W} ${H}`, "data-plot": name, role: "img", "aria-label": title });
  return s;
}

// The smallest 1, 2, 2.5 or 5 times a power of ten at or above m: round axis labels.
function niceMax(m) {
  if (m <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(m)));
  for (const f of [1, 2, 2.5, 5, 10]) if (f * p >= m) return f * p;
  return 10 * p;
}

function yAxis(s, rawMax, fmt) {
  const max = fmt && fmt.exact ? rawMax : niceMax(rawMax);
  const y = (v) => H - PAD.b - (max ? (v / max) * (H - PAD.t - PAD.b) : 0);
  for (let i = 0; i <= 4; i++) {
    const v = (max * i) / 4;
    s.appendChild(svg("line", { class: "grid", x1: PAD.l, x2: W - PAD.r, y1: y(v), y2: y(v) }));
    s.appendChild(svg("text", { x: PAD.l - 6, y: y(v) + 3, "text-anchor": "end" }, (fmt || short)(v)));
  }
  s.appendChild(svg("line", { class: "axis", x1: PAD.l, x2: PAD.l, y1: PAD.t, y2: H - PAD.b }));
  s.appendChild(svg("line", { class: "axis", x1: PAD.l, x2: W - PAD.r, y1: H - PAD.b, y2: H - PAD.b }));
  return y;
}

function emptyPlot(name, why) {
  const s = frame(name, why);
  s.appendChild(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }, why));
  return s;
}

// A line per series over x (versions); series: [{name, values, alt}]
function linePlot(name, xs, series, opts) {
  if (!xs.length) return emptyPlot(name, "no versions");
  const s = frame(name, name);
  const max = Math.max(1, ...series.map((se) => Math.max(...se.values)));
  const y = yAxis(s, max, opts && opts.fmt);
  const x0 = xs[0], x1 = xs[xs.length - 1];
  const x = (v) => PAD.l + (x1 === x0 ? (W - PAD.l - PAD.r) / 2 : ((v - x0) / (x1 - x0)) * (W - PAD.l - PAD.r));
  for (const [i, v] of [[0, x0], [1, Math.round((x0 + x1) / 2)], [2, x1]]) {
    s.appendChild(svg("text", { x: x(v), y: H - PAD.b + 14, "text-anchor": ["start", "middle", "end"][i] }, "v" + v));
  }
  s.appendChild(svg("text", { x: W / 2, y: H - 4, "text-anchor": "middle" }, "version"));
  series.forEach((se, k) => {
    let d = "";
    se.values.forEach((v, i) => { d += (i ? "L" : "M") + x(xs[i]).toFixed(1) + "," + y(v).toFixed(1); });
    if (xs.length === 1) d += "h1";
    s.appendChild(svg("path", { class: "mark-line" + (se.alt ? " alt" : ""), d, "data-points": se.values.length },
      svg("title", {}, se.name)));
    s.appendChild(svg("text", { class: "legend", x: PAD.l + 8 + k * 120, y: PAD.t + 10 }, "— " + se.name));
  });
  return s;
}

// Bars: items [{label, value, title}]
function barPlot(name, items, opts) {
  if (!items.length) return emptyPlot(name, (opts && opts.empty) || "nothing to show");
  const s = frame(name, name);
  const max = Math.max(...items.map((i) => i.value), opts && opts.max ? opts.max : 0) || 1;
  const y = yAxis(s, max, opts && opts.fmt);
  const bw = (W - PAD.l - PAD.r) / items.length;
  const every = Math.max(1, Math.ceil(items.length / 12));
  items.forEach((it, i) => {
    const h = H - PAD.b - y(it.value);
    s.appendChild(svg("rect", {
      class: "mark" + (opts && opts.alt ? " alt" : ""), x: (PAD.l + i * bw + Math.min(1, bw * 0.1)).toFixed(1),
      y: y(it.value).toFixed(1), width: Math.max(0.5, bw - Math.min(2, bw * 0.2)).toFixed(1), height: Math.max(0, h).toFixed(1),
      "data-label": it.label, "data-value": it.value,
    }, svg("title", {}, it.title || `${it.label}: ${it.value}`)));
    if (i % every === 0) {
      const lab = it.label.length > 14 ? it.label.slice(0, 13) + "…" : it.label;
      s.appendChild(svg("text", { x: PAD.l + i * bw + bw / 2, y: H - PAD.b + 14, "text-anchor": "middle" }, lab));
    }
  });
  if (opts && opts.xlabel) s.appendChild(svg("text", { x: W / 2, y: H - 4, "text-anchor": "middle" }, opts.xlabel));
  return s;
}

// Versions (ticks) and tags (flags) on a time axis; the span expiry would drop shaded.
function timePlot(hist, tags, expiry) {
  const ts = hist.timestamp_ms;
  if (!ts.length) return emptyPlot("time", "no versions");
  const s = frame("time", "versions and tags over time");
  const all = ts.concat(tags.map((t) => Date.parse(t.commit_time) || ts[0]));
  let t0 = Math.min(...all), t1 = Math.max(...all);
  if (t1 === t0) { t0 -= 1000; t1 += 1000; }
  const x = (v) => PAD.l + ((v - t0) / (t1 - t0)) * (W - PAD.l - PAD.r);
  s.appendChild(svg("line", { class: "axis", x1: PAD.l, x2: W - PAD.r, y1: H - PAD.b, y2: H - PAD.b }));
  const gone = (expiry && expiry.expired_versions) || [];
  if (gone.length && expiry.expired_from_ms !== null) {
    const a = x(Math.max(t0, expiry.expired_from_ms)), b = x(Math.min(t1, expiry.expired_to_ms));
    s.appendChild(svg("rect", { class: "expiry", x: a - 2, y: PAD.t, width: Math.max(4, b - a + 4), height: H - PAD.t - PAD.b },
      svg("title", {}, `expire would drop ${gone.length} versions, freeing ${bytes(expiry.deleted_bytes)}`)));
    s.appendChild(svg("text", { x: a + 4, y: PAD.t + 12, class: "legend" }, `expire: −${num(gone.length)} versions, ${bytes(expiry.deleted_bytes)}`));
  }
  let d = "";
  for (const t of ts) d += "M" + x(t).toFixed(1) + "," + (H - PAD.b - 40) + "v30";
  const shown = hist.sampled ? `${num(ts.length)} of ${num(hist.total)} versions shown` : `${num(hist.total)} versions`;
  s.appendChild(svg("path", { class: "mark-ticks", d, "data-points": ts.length }, svg("title", {}, shown)));
  s.appendChild(svg("text", { x: PAD.l, y: H - PAD.b - 46, class: "legend" }, shown));
  tags.forEach((t, i) => {
    const tx = x(Date.parse(t.commit_time));
    const ty = PAD.t + 22 + (i % 5) * 14;
    s.appendChild(svg("path", { class: "mark-tag", d: `M${tx.toFixed(1)},${ty} l6,-4 l-6,-4 z`, "data-tag": t.tag_name },
      svg("title", {}, `tag ${t.tag_name} → v${t.tagged_version}`)));
    s.appendChild(svg("line", { class: "grid", x1: tx, x2: tx, y1: ty - 8, y2: H - PAD.b }));
    s.appendChild(svg("text", { x: tx + 8, y: ty - 1 }, t.tag_name));
  });
  s.appendChild(svg("text", { x: PAD.l, y: H - PAD.b + 14 }, when(t0)));
  s.appendChild(svg("text", { x: W - PAD.r, y: H - PAD.b + 14, "text-anchor": "end" }, when(t1)));
  return s;
}

function plotPanel(title, note, plot) {
  return el("div", { class: "panel plot" }, el("h2", {}, title), note ? el("div", { class: "muted" }, note) : null, plot);
}

// ---- catalog page ----------------------------------------------------------------------

async function catalogPage() {
  crumbs.replaceChildren();
  const doc = await api("catalog");
  crumbs.replaceChildren(el("span", {}, doc.uri));
  if (doc.kind === "table" && doc.tables.length === 1 && !location.hash.startsWith("#/catalog")) {
    location.hash = "#/t/" + encodeURIComponent(doc.tables[0].key);
    return;
  }
  const empty = doc.namespaces.filter((n) => !doc.tables.some((t) => t.namespace === n));
  main.replaceChildren(
    el("h1", {}, doc.kind === "catalog" ? "Catalog " : "Table ", el("span", { class: "mono" }, doc.uri)),
    el("div", { class: "muted" }, `${doc.namespaces.length} namespace(s), ${doc.tables.length} table(s)` +
      (empty.length ? `; empty namespaces: ${empty.join(", ")}` : "")),
    el("div", { class: "panel", id: "tables" }, dataTable([
      ["table", (t) => el("a", { href: "#/t/" + encodeURIComponent(t.key), class: "table-link" }, t.key)],
      ["version", (t) => num(t.version), true],
      ["rows", (t) => num(t.rows), true],
      ["files", (t) => num(t.files), true],
      ["size", (t) => bytes(t.bytes), true],
      ["last commit", (t) => t.error ? el("span", { class: "err" }, t.error) : `${when(t.last_commit_ms)} (${t.last_operation})`],
      ["online", (t) => el("span", { class: "badge " + (t.online ? "on" : "off") }, t.online ? "online" : "offline")],
      ["location", (t) => el("span", { class: "mono muted" }, t.location)],
    ], doc.tables)),
  );
}

// ---- table page ------------------------------------------------------------------------

let pageSeq = 0;  // which page load is the current one (answers for an older one are dropped)
const state = { key: null, branch: null, overview: null, pick: null, filesOffset: 0, sampleOffset: 0, versionsOffset: 0 };

function tq(extra) {
  const p = new URLSearchParams();
  if (state.branch) p.set("branch", state.branch);
  for (const [k, v] of Object.entries(extra || {})) if (v !== null && v !== undefined && v !== "") p.set(k, v);
  const s = p.toString();
  return s ? "?" + s : "";
}
function tpath(what, extra) { return "tables/" + encodeURIComponent(state.key) + (what ? "/" + what : "") + tq(extra); }
function pickQuery() { return state.pick ? (state.pick.tag ? { tag: state.pick.tag } : { version: state.pick.version }) : {}; }

async function tablePage(key, params) {
  const seq = pageSeq;
  state.key = key; state.branch = params.get("branch"); state.pick = null;
  state.filesOffset = 0; state.sampleOffset = 0; state.versionsOffset = 0;
  // every request at once (each answer is drawn as it comes): the server answers them in parallel
  const asked = {
    ov: api(tpath("")), history: api(tpath("history")), bytes: api(tpath("bytes")), health: api(tpath("health")),
    layout: api(layoutPath()), timeline: api(timelinePath()), files: api(filesPath()), sample: api(samplePath()),
  };
  for (const p of Object.values(asked)) p.catch(() => null);  // each failure is shown where its answer goes
  const ov = await asked.ov;
  state.overview = ov;
  crumbs.replaceChildren(el("a", { href: "#/catalog", id: "to-catalog" }, "catalog"), el("span", {}, "›"), el("span", {}, key),
    el("span", {}, state.branch ? `(branch ${state.branch})` : ""));
  const sections = {
    cards: el("div", { class: "cards" }),
    health: el("div", { class: "panel", id: "health" }, el("h2", {}, "Health"), el("p", { class: "muted" }, "computing…")),
    series: el("div", { class: "grid2", id: "series" }),
    layout: el("div", { class: "grid2", id: "layout" }),
    travel: el("div", { class: "panel", id: "travel" }),
    timeline: el("div", { class: "panel", id: "timeline" }),
    meta: el("div", { class: "grid2", id: "meta" }),
  };
  main.replaceChildren(
    el("h1", {}, key, " ", el("span", { class: "muted mono" }, ov.location)),
    sections.cards, sections.health,
    el("h2", {}, "Over versions"), sections.series,
    el("h2", { id: "layout-title" }, "Layout"), sections.layout,
    sections.travel, sections.timeline, sections.meta,
  );
  const card = (k, v) => el("div", { class: "card" }, el("div", { class: "k" }, k), el("div", { class: "v" }, v));
  sections.cards.replaceChildren(card("version", num(ov.version)), card("rows", num(ov.rows)), card("files", num(ov.files)),
    card("last commit", when(ov.timestamp_ms)), card("operation", ov.operation), card("tags", num(ov.tags.length)),
    card("branches", num(ov.branches.length)), card("branch", ov.branch));
  renderMeta(sections.meta, ov);
  renderTravelControls(sections.travel, ov);
  // one slot per plot, filled as each answer arrives (in whatever order)
  const seriesPanel = el("div", { class: "panel" }, el("p", { class: "muted" }, "loading…"));
  const bytesPanel = el("div", { class: "panel" }, el("p", { class: "muted" }, "loading…"));
  sections.series.replaceChildren(seriesPanel, bytesPanel);
  const expiryAdvice = el("div", { class: "advice", "data-kind": "expiry-pending" }, el("span", { class: "muted" }, "expiry preview: computing…"));
  let timePanel = null, hist = null;
  await Promise.all([
    asked.history.then((h) => { hist = h; timePanel = renderSeries(seriesPanel, h, ov); }).catch((e) => fail(seriesPanel, e)),
    asked.bytes.then((b) => bytesPanel.replaceWith(plotPanel("Live bytes", b.sampled ? `at ${b.version.length} versions spread over the history` : "data bytes after each version",
      linePlot("bytes", b.version, [{ name: "bytes", values: b.bytes }], { fmt: (v) => bytes(Math.round(v)) })))).catch((e) => fail(bytesPanel, e)),
    renderLayout(sections.layout, asked.layout).catch((e) => fail(sections.layout, e)),
    asked.health.then((h) => renderHealth(sections.health, h, expiryAdvice)).catch((e) => fail(sections.health, e)),
    renderTimeline(sections.timeline, asked.timeline).catch((e) => fail(sections.timeline, e)),
    renderFiles(asked.files).catch((e) => fail(document.getElementById("files"), e)),
    renderSample(asked.sample).catch((e) => fail(document.getElementById("sample"), e)),
  ]);
  document.body.setAttribute("data-loaded", "table");
  performance.mark("lamina-plots-drawn");  // for timing the page (bench/ui_bench.py)
  // last: expiry's dry run, which can take longer than everything else together
  try {
    const ex = await api(tpath("expiry"));
    if (seq !== pageSeq) return;  // the user went to another page meanwhile
    const a = ex.advice[0];
    expiryAdvice.replaceWith(adviceBox(a));
    if (timePanel && a) timePanel.replaceChild(timePlot(hist, ov.tags, a.facts), timePanel.lastChild);
    document.body.setAttribute("data-expiry", "shown");
  } catch (e) {
    fail(expiryAdvice, e);
    document.body.setAttribute("data-expiry", "error");
  }
}

function adviceBox(a) {
  return el("div", { class: "advice " + a.severity, "data-kind": a.kind }, el("div", {}, a.message), a.command ? el("code", {}, a.command) : null);
}

function renderHealth(where, h, expiryAdvice) {
  where.replaceChildren(el("h2", {}, "Health"));
  if (!h.advice.length) where.appendChild(el("div", { class: "advice ok" }, "No small files or deletes worth acting on."));
  for (const a of h.advice) where.appendChild(adviceBox(a));
  where.appendChild(expiryAdvice);
}

// The rows, files and time plots; returns the time plot's panel (expiry's span is shaded in later).
function renderSeries(slot, h, ov) {
  const note = (what) => h.sampled ? `${what} at ${num(h.version.length)} of ${num(h.total)} versions (spread, the newest and the tagged)` : `${what} after each version`;
  const timePanel = plotPanel("Versions and tags in time", "shaded: what `lamina expire` (default policy) would drop", timePlot(h, ov.tags, null));
  slot.replaceWith(
    plotPanel("Rows", note("live rows"), linePlot("rows", h.version, [{ name: "rows", values: h.total_records }])),
    plotPanel("Files", note("live data files"), linePlot("files", h.version, [{ name: "files", values: h.total_files }])),
    timePanel,
  );
  return timePanel;
}

// What each panel asks for (``answer``: its answer, when already asked for).
function layoutPath() { return tpath("layout", pickQuery()); }
function timelinePath() { return tpath("versions", { offset: state.versionsOffset, limit: 50 }); }
function filesPath() { return tpath("files", { ...pickQuery(), offset: state.filesOffset, limit: 50 }); }
function samplePath() { return tpath("sample", { ...pickQuery(), offset: state.sampleOffset, limit: 25 }); }

async function renderLayout(where, answer) {
  const lay = await (answer || api(layoutPath()));
  document.getElementById("layout-title").textContent = `Layout of version ${lay.version}: ${num(lay.files)} files, ${bytes(lay.bytes)}, ${num(lay.rows)} rows`;
  const parts = lay.partitions;
  const label = (p) => p.partition || "(unpartitioned)";
  where.replaceChildren(
    plotPanel("Data-file sizes", "files per size bucket (small files on the left)",
      barPlot("sizes", lay.size_histogram.map((b) => ({ label: bytes(b.min_bytes), value: b.files, title: `${bytes(b.min_bytes)}–${bytes(b.max_bytes)}: ${b.files} files` })),
        { xlabel: "file size (≥)", empty: "no files" })),
    plotPanel("Files per partition", "skew: one bar per partition",
      barPlot("partition-files", parts.map((p) => ({ label: label(p), value: p.files, title: `${label(p)}: ${p.files} files, ${bytes(p.bytes)}` })), { empty: "no files" })),
    plotPanel("Rows per partition", "live rows",
      barPlot("partition-rows", parts.map((p) => ({ label: label(p), value: p.rows, title: `${label(p)}: ${p.rows} rows` })), { empty: "no files", alt: true })),
    plotPanel("Rows deleted by deletion vectors", "share of each partition's rows",
      barPlot("partition-deleted", parts.map((p) => ({ label: label(p), value: p.deleted_share, title: `${label(p)}: ${(100 * p.deleted_share).toFixed(1)}% (${p.deleted_rows} rows)` })),
        { empty: "no files", max: 0.01, fmt: (v) => (100 * v).toFixed(1).replace(/\.0$/, "") + "%" })),
  );
}

function renderTravelControls(where, ov) {
  const sel = el("select", { id: "pick" },
    el("option", { value: "" }, `latest (v${ov.version})`),
    ov.tags.map((t) => el("option", { value: "tag:" + t.tag_name }, `tag ${t.tag_name} (v${t.tagged_version})`)));
  const ver = el("input", { id: "pick-version", type: "number", min: "0", placeholder: "version", class: "narrow" });
  const go = el("button", { id: "pick-go", onclick: () => {
    if (ver.value !== "") { sel.value = ""; choose({ version: ver.value }); } else if (sel.value.startsWith("tag:")) choose({ tag: sel.value.slice(4) }); else choose(null);
  } }, "Show");
  sel.addEventListener("change", () => { ver.value = ""; go.click(); });
  const branches = el("select", { id: "branch" }, ov.branches.map((b) => el("option", { value: b.name }, `${b.name} (v${b.head_version})`)));
  branches.value = state.branch || "main";
  branches.addEventListener("change", () => {
    location.hash = "#/t/" + encodeURIComponent(state.key) + (branches.value === "main" ? "" : "?branch=" + encodeURIComponent(branches.value));
  });
  where.replaceChildren(
    el("h2", {}, "Time travel"),
    el("div", { class: "controls" }, el("label", {}, "branch ", branches), el("label", {}, "version or tag ", sel), ver, go,
      el("span", { class: "muted", id: "picked" }, `showing version ${ov.version}`)),
    el("div", { class: "grid2" }, el("div", { id: "files" }), el("div", { id: "sample" })),
  );
}

async function choose(pick) {
  state.pick = pick; state.filesOffset = 0; state.sampleOffset = 0;
  document.body.removeAttribute("data-picked");
  const picked = document.getElementById("picked");
  picked.textContent = "loading…";
  try {
    await Promise.all([renderFiles(), renderSample(), renderLayout(document.getElementById("layout"))]);
  } catch (e) { picked.textContent = String(e.message || e); picked.className = "err"; return; }
  picked.className = "muted";
  document.body.setAttribute("data-picked", document.getElementById("files-table").getAttribute("data-version"));
}

function pager(total, offset, limit, move) {
  return el("div", { class: "pager" },
    el("button", { class: "prev", disabled: offset <= 0 ? "" : null, onclick: () => move(Math.max(0, offset - limit)) }, "‹ prev"),
    el("span", { class: "muted" }, total ? `${num(offset + 1)}–${num(Math.min(total, offset + limit))} of ${num(total)}` : "none"),
    el("button", { class: "next", disabled: offset + limit >= total ? "" : null, onclick: () => move(offset + limit) }, "next ›"));
}

async function renderFiles(answer) {
  const where = document.getElementById("files");
  const doc = await (answer || api(filesPath()));
  document.getElementById("picked").textContent = `showing version ${doc.version}` + (state.pick && state.pick.tag ? ` (tag ${state.pick.tag})` : "");
  where.replaceChildren(el("h3", {}, `Files of version ${doc.version}`),
    el("div", { id: "files-table", "data-version": doc.version, "data-total": doc.total }, dataTable([
      ["path", (f) => el("span", { class: "mono file-path" }, f.path)],
      ["partition", (f) => f.partition || ""],
      ["rows", (f) => num(f.record_count), true],
      ["size", (f) => bytes(f.size), true],
      ["deleted", (f) => f.dv_cardinality ? num(f.dv_cardinality) : "", true],
      ["added in", (f) => "v" + f.added_version, true],
    ], doc.files, { scroll: true })),
    pager(doc.total, doc.offset, doc.limit, (o) => { state.filesOffset = o; renderFiles().catch((e) => fail(where, e)); }));
}

async function renderSample(answer) {
  const where = document.getElementById("sample");
  const doc = await (answer || api(samplePath()));
  where.replaceChildren(el("h3", {}, `Rows of version ${doc.version} (sample, ${num(doc.files_read)} file(s) read)`),
    el("div", { id: "sample-table" }, dataTable(doc.columns.map((c) => [c, (r) => r[c] === null ? "null" : String(r[c])]), doc.rows, { scroll: true })),
    pager(doc.total, doc.offset, doc.limit, (o) => { state.sampleOffset = o; renderSample().catch((e) => fail(where, e)); }));
}

async function renderTimeline(where, answer) {
  const doc = await (answer || api(timelinePath()));
  const delta = (s, a, r) => {
    const plus = s[a] ? "+" + num(s[a]) : "", minus = s[r] ? "−" + num(s[r]) : "";
    return [plus, minus].filter(Boolean).join(" ");
  };
  const what = (v) => {
    const s = v.summary, extra = [];
    for (const k of ["mode", "publish", "branch", "rollback-to", "rollback-tag", "deleted-rows", "inserted-rows", "compacted-files", "schema-changes", "spec-changes"]) {
      if (s[k] !== undefined) extra.push(`${k}=${typeof s[k] === "object" ? JSON.stringify(s[k]) : s[k]}`);
    }
    return el("details", {}, el("summary", {}, extra.join(", ") || "summary"), el("pre", { class: "mono" }, JSON.stringify(s, null, 1)));
  };
  where.replaceChildren(el("h2", {}, "History (newest first)"),
    el("div", { id: "timeline-table" }, dataTable([
      ["version", (v) => el("a", { href: "#", class: "travel", onclick: (e) => { e.preventDefault(); document.getElementById("pick-version").value = v.version; document.getElementById("pick-go").click(); window.scrollTo(0, document.getElementById("travel").offsetTop); } }, "v" + v.version), true],
      ["committed", (v) => when(v.timestamp_ms)],
      ["operation", (v) => el("b", {}, v.operation)],
      ["files", (v) => delta(v.summary, "added-files", "removed-files"), true],
      ["rows", (v) => delta(v.summary, "added-records", "removed-records"), true],
      ["total rows", (v) => num(v.summary["total-records"]), true],
      ["tags", (v) => v.tags.map((t) => el("span", { class: "badge tag" }, t))],
      ["details (commit " + "id on hover)", (v) => el("span", { title: v.commit_id || "" }, what(v))],
    ], doc.versions, { scroll: true })),
    pager(doc.total, doc.offset, doc.limit, (o) => { state.versionsOffset = o; renderTimeline(where).catch((e) => fail(where, e)); }));
}

function renderMeta(where, ov) {
  const kv = (obj) => dataTable([["key", (r) => r[0]], ["value", (r) => el("span", { class: "mono" }, String(r[1]))]], Object.entries(obj));
  where.replaceChildren(
    el("div", { class: "panel", id: "schema" }, el("h2", {}, `Schema (id ${ov.schema_id})`), dataTable([
      ["column", (c) => el("span", { class: "mono" }, "  ".repeat(c.depth || 0) + c.path)],
      ["id", (c) => c.field_id, true], ["type", (c) => el("span", { class: "mono" }, c.type)],
      ["required", (c) => c.required ? "yes" : ""], ["doc / default", (c) => [c.doc, c.initial_default].filter((x) => x !== null && x !== undefined).join(" · ")],
    ], ov.schema)),
    el("div", { class: "panel", id: "partitioning" }, el("h2", {}, "Partitioning and sort order"),
      ov.partition_spec.fields.length ? dataTable([["field", (f) => f.name], ["source id", (f) => f.source_id, true], ["transform", (f) => f.transform]], ov.partition_spec.fields)
        : el("p", { class: "muted" }, "unpartitioned"),
      ov.partition_specs.length > 1 ? el("p", { class: "muted" }, `${ov.partition_specs.length} specs over time (files keep theirs)`) : null,
      el("p", { class: "muted" }, "sort order: " + (ov.sort_order ? JSON.stringify(ov.sort_order) : (ov.properties["write.sort-order"] || "none")))),
    el("div", { class: "panel", id: "tags" }, el("h2", {}, "Tags"), ov.tags.length ? dataTable([
      ["tag", (t) => el("span", { class: "badge tag" }, t.tag_name)], ["version", (t) => "v" + t.tagged_version, true],
      ["committed", (t) => t.commit_time], ["rows", (t) => num(t.record_count), true], ["expires", (t) => t.expires_at || ""],
    ], ov.tags) : el("p", { class: "muted" }, "no tags")),
    el("div", { class: "panel", id: "branches" }, el("h2", {}, "Branches"), dataTable([
      ["branch", (b) => el("a", { href: "#/t/" + encodeURIComponent(state.key) + (b.name === "main" ? "" : "?branch=" + encodeURIComponent(b.name)) }, b.name)],
      ["from", (b) => b.base_branch ? `${b.base_branch} v${b.base_version}` : ""], ["head", (b) => "v" + b.head_version, true],
      ["rows", (b) => num(b.head_records), true], ["versions", (b) => num(b.versions), true],
    ], ov.branches)),
    el("div", { class: "panel", id: "properties" }, el("h2", {}, "Properties and features"),
      Object.keys(ov.properties).length ? kv(ov.properties) : el("p", { class: "muted" }, "no properties"),
      el("p", {}, "reader features: ", ov.reader_features.map((f) => el("span", { class: "badge" }, f)), ov.reader_features.length ? null : "none"),
      el("p", {}, "writer features: ", ov.writer_features.map((f) => el("span", { class: "badge" }, f)), ov.writer_features.length ? null : "none"),
      el("p", { class: "muted" }, `format version ${ov.format_version} · uuid ${ov.uuid}`)),
  );
}

// ---- routing ---------------------------------------------------------------------------

async function route() {
  document.body.removeAttribute("data-loaded");
  document.body.removeAttribute("data-expiry");
  pageSeq++;
  const h = location.hash || "#/";
  const [path, qs] = h.slice(1).split("?");
  const params = new URLSearchParams(qs || "");
  try {
    if (path.startsWith("/t/")) await tablePage(decodeURIComponent(path.slice(3)), params);
    else { await catalogPage(); if (!location.hash.startsWith("#/t/")) document.body.setAttribute("data-loaded", "catalog"); }
  } catch (e) {
    fail(main, e);
    document.body.setAttribute("data-loaded", "error");
  }
}

window.addEventListener("hashchange", route);
route();
