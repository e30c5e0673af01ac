// The viewer's pages: Runs, Study, Run, World and Agent, routed by the URL's #fragment.
// Every page reads the JSON endpoints under /api and follows a running run by polling.
"use strict";

const page = document.getElementById("page");
const POLL_MS = 1000;
let current = null; // {poll: async fn called every POLL_MS while the page is shown}
let timer = null;

function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (v !== null && v !== undefined) el.setAttribute(k, v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined)
    el.append(c instanceof Node ? c : String(c));
  return el;
}

// The session's token, in the page the viewer served: requests that spend (interviews) carry it.
const TOKEN = document.querySelector('meta[name="agentsim-token"]').content;

async function api(path, options) {
  if (options && options.method && options.method !== "GET")
    options = { ...options, headers: { ...(options.headers || {}), "X-Agentsim-Token": TOKEN } };
  const r = await fetch(path, options);
  const data = await r.json().catch(() => ({ error: `${path}: HTTP ${r.status}` }));
  if (!r.ok) throw new Error(data.error || `${path}: HTTP ${r.status}`);
  return data;
}

const enc = encodeURIComponent;
const runUrl = (run) => `/api/runs/${enc(run)}`;

function crumbs(...links) {
  document.getElementById("crumbs").replaceChildren(
    h("a", { href: "#/" }, "Runs"), ...links.map(([href, text]) => h("a", { href }, text)));
}

function showError(err) {
  page.replaceChildren(h("p", { class: "error", id: "error" }, String(err.message || err)));
}

function statusCell(row) {
  const why = [row.reason, ...(row.over_limits || [])].filter(Boolean).join("\n");
  const status = h("span", { class: `status ${row.state.replaceAll(" ", "-")}`, title: why }, row.state);
  const problems = row.problems || [];
  if (!problems.length) return status;
  // A run with problems says so beside its state; the tooltip lists them.
  return h("span", {}, status, " ",
    h("span", { class: "problems", title: problems.join("\n") }, "⚠ problems"));
}

// What a run was forked from ("" for a run that is not a fork).
function lineageText(row) {
  return row.parent ? `forked from ${row.parent.run_id} at tick ${row.parent.tick}` : "";
}

// Why a run stopped, and the failure shares over their limits: a line each.
function whyLines(row) {
  const lines = [];
  if (row.reason) lines.push(h("p", { class: "reason", id: "run-reason" }, `reason: ${row.reason}`));
  for (const p of row.over_limits || []) lines.push(h("p", { class: "reason" }, `over limit: ${p}`));
  return lines;
}

function tickText(row) {
  return row.total_ticks ? `${row.ticks_done} / ${row.total_ticks}` : String(row.ticks_done);
}

function progressBar(row) {
  const pct = row.total_ticks ? Math.min(100, (100 * row.ticks_done) / row.total_ticks) : 0;
  const span = h("span"); span.style.width = pct.toFixed(1) + "%";
  return h("div", { class: "bar", title: pct.toFixed(0) + "%" }, span);
}

function setLive(state) {
  document.getElementById("live").textContent =
    state === "running" ? "● live: following the run" : "";
}

// -- Runs ---------------------------------------------------------------------------------
async function runsPage() {
  crumbs();
  const body = h("tbody");
  page.replaceChildren(h("h1", {}, "Runs"), h("p", { class: "muted", id: "workspace" }),
    h("div", { class: "card" }, h("table", { id: "runs" }, h("thead", {}, h("tr", {},
      ["run", "status", "ticks", "progress", "agents", "errors", "degraded", "started"].map(
        (t) => h("th", { class: ["ticks", "agents", "errors", "degraded"].includes(t) ? "num" : "" }, t)))),
      body)),
    h("div", { id: "studies" }));
  let shown = null; // the rows drawn last: a poll that brings nothing new leaves the table alone
  async function refresh() {
    const data = await api("/api/runs");
    document.getElementById("workspace").textContent = `workspace ${data.workspace}`;
    const key = JSON.stringify(data.runs);
    if (key === shown) return;
    shown = key;
    body.replaceChildren(...data.runs.map((r) => h("tr", {
      "data-run": r.id, class: (r.problems || []).length ? "with-problems" : null },
      h("td", {}, h("a", { href: `#/run/${enc(r.id)}` }, r.id),
        r.parent ? h("div", { class: "muted lineage" }, lineageText(r)) : ""),
      h("td", {}, statusCell(r)),
      h("td", { class: "num ticks" }, tickText(r)), h("td", {}, progressBar(r)),
      h("td", { class: "num" }, r.agents), h("td", { class: "num" }, r.errors),
      h("td", { class: "num" }, r.degraded), h("td", { class: "muted" }, r.started || ""))));
    if (!data.runs.length) body.append(h("tr", {}, h("td", { colspan: 8 }, "No runs in this workspace.")));
    document.getElementById("studies").replaceChildren(...(data.studies || []).map(studyCard));
    setLive(data.runs.some((r) => r.state === "running") ? "running" : "");
  }
  await refresh();
  return { poll: refresh };
}

// -- Studies ------------------------------------------------------------------------------
// A study on the Runs page: its arms, each with its runs (a link each once its folder exists).
function studyCard(st) {
  const runLink = (r) => r.served ? h("a", { href: `#/run/${enc(r.id)}` }, r.run) : h("span", {}, r.run);
  return h("div", { class: "card study", "data-study": st.id, style: "margin-top:14px" },
    h("h2", {}, "Study ", h("a", { href: `#/study/${enc(st.id)}` }, st.name || st.id)),
    st.error ? h("p", { class: "error" }, st.error) : null,
    h("ul", { class: "plain" }, st.arms.map((a) => h("li", { "data-arm": a.name },
      h("strong", {}, a.name), a.name === st.control ? " (control)" : "",
      a.from_tick !== null && a.from_tick !== undefined ? ` (forked at tick ${a.from_tick})` : "", ": ",
      ...a.runs.flatMap((r, i) => [i ? ", " : "", runLink(r), ` (${r.state})`])))));
}

const fmtNum = (v) => Math.abs(v) >= 1000 ? v.toFixed(1) : v.toFixed(3);

function estimateText(e, signed) {
  if (!e || e.mean === null) return e && e.note ? `no data (${e.note})` : "—";
  const mean = signed && e.mean >= 0 ? "+" + fmtNum(e.mean) : fmtNum(e.mean);
  if (e.low === null || e.high === null) return `${mean} (no interval: ${e.n} replicate${e.n === 1 ? "" : "s"})`;
  const same = e.low === e.high ? " (no variation across replicates)" : "";
  return `${mean} [${fmtNum(e.low)}, ${fmtNum(e.high)}]${same}`;
}

function methodText(e) {
  return e.method === "paired t" ? `paired t, ${e.n} pairs` : e.method === "welch" ? "Welch t" : e.method;
}

// One measure of the comparison: the summary table, and each arm's mean over the ticks.
function comparisonCard(cmp, item, idx) {
  const level = `${Math.round(cmp.level * 100)}%`;
  const forks = item.final.some((r) => r.paired_vs);
  const head = ["arm", "n replicates", `mean [${level} CI]`, `difference to control [${level} CI]`];
  if (forks) head.push(`paired difference per agent [${level} CI]`);
  const rows = item.final.map((r) => h("tr", { "data-arm": r.arm },
    h("td", {}, r.arm), h("td", { class: "num" }, r.values.length), h("td", {}, estimateText(r.estimate)),
    h("td", {}, r.difference ? estimateText(r.difference, true) +
      (r.difference.mean !== null ? ` (${methodText(r.difference)})` : "") : "—"),
    forks ? h("td", {}, r.paired_agents ? `${estimateText(r.paired_agents, true)} (vs ${r.paired_vs})` : "—") : null));
  const canvas = h("canvas", { id: `cmp-chart-${idx}`, class: "chart" }), legend = h("div", { class: "legend" });
  const card = h("div", { class: "card comparison", "data-item": item.key, style: "margin-top:14px" },
    h("h2", {}, item.label), h("p", { class: "muted" }, `final value: ${item.final_is}; unit: ${item.unit}`),
    h("table", {}, h("tr", {}, head.map((t) => h("th", {}, t))), ...rows), canvas, legend);
  const n = item.ticks.length ? item.ticks[item.ticks.length - 1].tick + 1 : 0;
  const series = cmp.arms.map((a) => {
    const values = new Array(n).fill(null);
    for (const t of item.ticks) if (t.arms[a.name] && t.arms[a.name].mean !== null) values[t.tick] = t.arms[a.name].mean;
    return { label: `${a.name} (mean over replicates)`, values };
  });
  return { card, draw: () => window.charts.lineChart(canvas, legend, series, []) };
}

async function studyPage(study) {
  crumbs([`#/study/${enc(study)}`, `study ${study}`]);
  const data = await api(`/api/studies/${enc(study)}`);
  const cmp = data.comparison;
  const parts = [h("h1", { id: "study-title" }, `Study ${data.name || study}`), studyCard(data)];
  if (!cmp) parts.push(h("p", { class: "error", id: "comparison-error" }, data.comparison_error || "no comparison"));
  else {
    if (cmp.left_out.length) parts.push(h("div", { class: "card", id: "left-out", style: "margin-top:14px" },
      h("h2", {}, "Runs left out (not complete)"),
      h("ul", { class: "plain" }, cmp.left_out.map((lo) => h("li", {}, `${lo.run} (arm ${lo.arm}): ${lo.reason}`)))));
    const cards = cmp.items.map((it, i) => comparisonCard(cmp, it, i));
    parts.push(...cards.map((c) => c.card));
    if (cmp.notes.length) parts.push(h("div", { class: "card", id: "notes", style: "margin-top:14px" },
      h("h2", {}, "Notes"), h("ul", { class: "plain" }, cmp.notes.map((n) => h("li", {}, n)))));
    page.replaceChildren(...parts);
    cards.forEach((c) => c.draw());
    return { poll: null };
  }
  page.replaceChildren(...parts);
  return { poll: null };
}

// -- Run ----------------------------------------------------------------------------------
async function runPage(run) {
  crumbs([`#/run/${enc(run)}`, run], [`#/world/${enc(run)}`, "World"]);
  let data = await api(runUrl(run));
  const counter = h("span", { id: "tick-counter" });
  const grid = h("div", { class: "grid" });
  const markers = h("ul", { class: "plain", id: "markers" });
  const surveys = h("div", { id: "surveys" });
  const agents = agentPicker(run);
  page.replaceChildren(
    h("h1", { id: "run-title" }, run, " ", h("span", { id: "run-status" })),
    h("p", {}, counter, " · ", h("a", { href: `#/world/${enc(run)}` }, "World view →")),
    h("div", { id: "run-why" }),
    h("div", { class: "card", id: "behaviour", style: "margin-bottom:14px" }),
    grid,
    h("div", { class: "grid", style: "margin-top:14px" },
      h("div", { class: "card" }, h("h2", {}, "Interventions, surveys and hot reloads"), markers),
      h("div", { class: "card" }, h("h2", {}, "Survey answers"), surveys)),
    modelsCard(data.metrics),
    h("div", { class: "card", style: "margin-top:14px" }, h("h2", {}, "Agents"), agents));

  function chart(title, id, series) {
    const canvas = h("canvas", { id, class: "chart" }), legend = h("div", { class: "legend" });
    grid.append(h("div", { class: "card" }, h("h2", {}, title), canvas, legend));
    return () => series(canvas, legend);
  }
  const S = (keys) => keys.map((k) => ({ label: data.labels[k], values: data.series[k] }));
  const draws = [
    chart("Agent-steps and model calls per tick", "chart-steps", (c, l) =>
      window.charts.lineChart(c, l, S(["steps", "model_calls", "skipped"]), data.markers)),
    chart("Tokens per tick", "chart-tokens", (c, l) =>
      window.charts.lineChart(c, l, S(["prompt_tokens", "cached_prompt_tokens", "completion_tokens"]), data.markers)),
    chart("Degraded steps, errors, script and hook failures", "chart-failures", (c, l) =>
      window.charts.lineChart(c, l, S(["degraded", "errors", "script_failures", "hook_failures"]), data.markers)),
    chart("What the steps did", "chart-behaviour", (c, l) =>
      window.charts.lineChart(c, l, S(["acted", "unfinished", "tool_refused", "tool_failed"]), data.markers)),
    chart("Skills activated per tick", "chart-skills", (c) =>
      window.charts.heatMap(c, Object.entries(data.skills).map(([label, values]) => ({ label, values })))),
  ];
  // The measures the skills recorded (ctx.record): a chart each, a line per group (the mean).
  const measureCards = h("div", { class: "grid", id: "measures", style: "margin-top:14px" });
  grid.after(measureCards);
  function drawMeasures() {
    measureCards.replaceChildren(...Object.entries(data.measures || {}).map(([name, groups]) => {
      const canvas = h("canvas", { class: "chart", "data-measure": name });
      const legend = h("div", { class: "legend" });
      const card = h("div", { class: "card" }, h("h2", {}, `Measure: ${name} (mean per group)`),
        canvas, legend);
      measureCards.append(card);
      window.charts.lineChart(canvas, legend, Object.entries(groups).map(
        ([group, values]) => ({ label: `group ${group}`, values })), data.markers);
      return card;
    }));
  }

  function render() {
    document.getElementById("run-status").replaceChildren(statusCell(data));
    const lineage = lineageText(data);
    document.getElementById("run-why").replaceChildren(
      ...(lineage ? [h("p", { class: "muted", id: "run-lineage" }, lineage)] : []), ...whyLines(data));
    behaviourCard(data.behaviour || []);
    counter.textContent = `tick ${tickText(data)} · ${data.agents} agents · ${data.errors} errors`;
    counter.dataset.ticks = String(data.ticks_done);
    setLive(data.state);
    draws.forEach((d) => d());
    drawMeasures();
    markers.replaceChildren(...data.markers.map((m) => h("li", { class: `marker-${m.kind}` },
      `tick ${m.tick} · ${m.kind}: ${m.label}`)));
    if (!data.markers.length) markers.append(h("li", { class: "muted" }, "None."));
    surveys.replaceChildren(...data.surveys.map((s) => surveyBox(run, s)));
    if (!data.surveys.length) surveys.append(h("p", { class: "muted" }, "No survey answers."));
  }
  render();
  return {
    poll: async () => {
      const p = await api(`${runUrl(run)}/status`);
      if (p.ticks_done !== data.ticks_done || p.state !== data.state) {
        data = await api(runUrl(run));
        render();
      }
    },
  };
}

// What the agents did, before any result (agentsim.run.behaviour): a line for the run, each
// model and group; the notes a reader must see (no step acted, one action, echoed answers).
function behaviourCard(lines) {
  const card = document.getElementById("behaviour");
  const notes = lines.filter((l) => l.trim().startsWith("note:"));
  const counts = lines.filter((l) => !l.trim().startsWith("note:"));
  card.replaceChildren(h("h2", {}, "Behaviour"),
    ...(counts.length ? counts.map((l) => h("p", { class: "behaviour-line" }, l.trim()))
      : [h("p", { class: "muted" }, "No step yet.")]),
    ...notes.map((l) => h("p", { class: "error behaviour-note" }, l.trim().slice("note: ".length))));
}

function surveyBox(run, survey) {
  const list = h("ul", { class: "plain" });
  const box = h("div", { class: "survey", "data-survey": survey.name },
    h("p", {}, h("b", {}, survey.name), ` (tick ${survey.tick}, ${survey.answers} answers`,
      survey.not_ok ? h("span", { class: "not-ok" }, `; ${survey.not_ok} not the model's`) : "",
      "): ", h("i", {}, survey.question || "")), list);
  let offset = 0;
  const more = h("button", { onclick: () => load() }, "more");
  async function load() {
    const d = await api(`${runUrl(run)}/surveys/${enc(survey.name)}?offset=${offset}&limit=10`);
    list.append(...d.answers.map((a) => h("li", a.status === "ok" ? {} : { class: "not-ok" },
      h("a", { href: `#/agent/${enc(run)}/${enc(a.agent_id)}` }, a.agent_id), ": ",
      a.status === "ok" ? a.answer
        : `[${a.status}: ${a.reason || "no answer"}]${a.answer ? " " + a.answer : ""}`,
      ...(a.echo ? [" ", h("span", { class: "echo", title: "the answer only copies its own prompt" },
        "(echo)")] : []))));
    offset += d.answers.length;
    if (offset >= d.total) more.remove(); else box.append(more);
  }
  load().catch(showError);
  return box;
}

function agentPicker(run) {
  const input = h("input", { type: "search", id: "agent-search", placeholder: "search agent ids" });
  const list = h("ul", { class: "plain", id: "agent-list" });
  const info = h("span", { class: "muted", id: "agent-count" });
  let offset = 0;
  const limit = 25;
  const prev = h("button", { onclick: () => { offset = Math.max(0, offset - limit); load(); } }, "← prev");
  const next = h("button", { onclick: () => { offset += limit; load(); } }, "next →");
  async function load() {
    const d = await api(`${runUrl(run)}/agents?search=${enc(input.value)}&offset=${offset}&limit=${limit}`);
    list.replaceChildren(...d.agents.map((a) => h("li", {},
      h("a", { href: `#/agent/${enc(run)}/${enc(a)}`, "data-agent": a }, a))));
    info.textContent = d.total ? `${offset + 1}-${offset + d.agents.length} of ${d.total}` : "no match";
    prev.disabled = offset === 0;
    next.disabled = offset + d.agents.length >= d.total;
  }
  let pending = null;
  input.addEventListener("input", () => {
    clearTimeout(pending);
    pending = setTimeout(() => { offset = 0; load().catch(showError); }, 200);
  });
  load().catch(showError);
  return h("div", {}, h("div", { class: "toolbar" }, input, prev, next, info), list);
}

// -- World --------------------------------------------------------------------------------
async function worldPage(run) {
  crumbs([`#/run/${enc(run)}`, run], [`#/world/${enc(run)}`, "World"]);
  let data = await api(`${runUrl(run)}/world`);
  const canvas = h("canvas", { id: "world" });
  const slider = h("input", { type: "range", id: "tick-slider", min: 0, step: 1 });
  const label = h("span", { id: "tick-label" });
  const counter = h("span", { id: "tick-counter" });
  const play = h("button", { id: "play" }, "▶ play");
  const occ = h("tbody");
  const graph = h("canvas", { id: "graph" }), opinions = h("canvas", { id: "opinions" });
  const graphInfo = h("p", { class: "muted" }), opinionsInfo = h("p", { class: "muted" });
  const graphLegend = h("div", { class: "legend", id: "graph-legend" });
  const opinionsLegend = h("div", { class: "legend", id: "opinions-legend" });
  const mapCard = h("div", { class: "card", id: "map-card" },
    h("div", { class: "toolbar" }, play, slider, label), canvas,
    h("div", { class: "legend", id: "map-legend" }));
  const occCard = h("div", { class: "card", id: "occupancy-card" }, h("h2", {}, "Occupancy at this tick"),
    h("table", { id: "occupancy" }, h("thead", {}, h("tr", {}, h("th", {}, "place"),
      h("th", {}, "category"), h("th", { class: "num" }, "agents"))), occ));
  const noMap = h("p", { class: "muted", id: "no-map" });
  page.replaceChildren(
    h("h1", {}, `World of ${run}`),
    h("p", {}, counter, " · ", h("span", { class: "muted", id: "world-agents" })),
    noMap, mapCard,
    h("div", { class: "grid", style: "margin-top:14px" }, occCard,
      h("div", { class: "card" }, h("h2", {}, "Follow graph"), graph, graphLegend, graphInfo),
      h("div", { class: "card" }, h("h2", {}, "Opinion distribution over ticks"), opinions,
        opinionsLegend, opinionsInfo)));
  const map = new window.world.WorldMap(canvas, data);

  function lastTick() { return Math.max(0, data.run.ticks_done - 1); }
  function show(t) {
    const { counts, transit } = map.setTick(t);
    label.textContent = `tick ${t}`;
    const rows = data.places.map((p, i) => [p, counts[i]]).filter(([, c]) => c > 0)
      .sort((a, b) => b[1] - a[1]).slice(0, 15);
    occ.replaceChildren(...rows.map(([p, c]) => h("tr", { "data-place": p.id },
      h("td", {}, p.id), h("td", {}, p.category), h("td", { class: "num" }, c))));
    if (transit) occ.append(h("tr", {}, h("td", {}, "in transit"), h("td"), h("td", { class: "num" }, transit)));
  }
  function renderStatic() {
    // The map and the occupancy only for a run whose modules have places (no city: no map).
    const places = data.places.length > 0;
    mapCard.hidden = !places;
    occCard.hidden = !places;
    noMap.textContent = places ? "" : `No module of this run has places to draw (modules: ${
      data.modules.join(", ") || "none"}); the tick slider is on the map of a run with a city.`;
    const cats = [...new Set(data.places.map((p) => p.category))];
    document.getElementById("map-legend").replaceChildren(
      ...cats.map((c) => window.charts.swatch(window.world.categoryColor(c), c)),
      window.charts.swatch("#9aa1ab", "in transit (outside its last place)"));
    counter.textContent = `tick ${data.run.ticks_done} done · ${data.run.state}`;
    counter.dataset.ticks = String(data.run.ticks_done);
    setLive(data.run.state);
    document.getElementById("world-agents").textContent = data.agents.length < data.agents_total
      ? `drawing the first ${data.agents.length} of ${data.agents_total} agents` : `${data.agents.length} agents`;
    const follow = slider.value === slider.max;
    slider.max = String(lastTick());
    if (follow) slider.value = slider.max;
    const g = window.world.drawGraph(graph, data.agents, data.edges);
    graphInfo.textContent = data.edges.length
      ? `who follows whom: ${g.nodes} agents reached from ${data.agents[0]} (${g.edges} links), ` +
        `coloured by group (${Object.keys(g.groups).join(", ")})`
      : "No module of this run has a follow graph.";
    graphLegend.replaceChildren(...Object.entries(g.groups).map(
      ([name, color]) => window.charts.swatch(color, `group ${name}`)));
    opinionsLegend.replaceChildren(
      window.charts.swatch("rgba(130,80,223,0.2)", "few agents in the bin"),
      window.charts.swatch("rgba(130,80,223,1)", "most agents in the bin"),
      window.charts.swatch("#e8710a", "mean opinion"));
    // A run without them shows a line saying so, not an empty drawing.
    graph.hidden = graphLegend.hidden = !data.edges.length;
    opinionsLegend.hidden = !data.opinions.length;
    opinions.hidden = !data.opinions.length;
    opinionsInfo.textContent = data.opinions.length ? "" : "No module of this run logs opinions.";
    window.world.drawOpinions(opinions, data.opinions);
  }
  renderStatic();
  slider.value = "0";
  show(0);
  slider.addEventListener("input", () => show(Number(slider.value)));
  let playing = null;
  play.addEventListener("click", () => {
    if (playing) { clearInterval(playing); playing = null; play.textContent = "▶ play"; return; }
    play.textContent = "❚❚ pause";
    playing = setInterval(() => {
      const t = Number(slider.value) >= lastTick() ? 0 : Number(slider.value) + 1;
      slider.value = String(t); show(t);
    }, 400);
  });
  return {
    poll: async () => {
      const p = await api(`${runUrl(run)}/status`);
      if (p.ticks_done !== data.run.ticks_done || p.state !== data.run.state) {
        const t = Number(slider.value), atEnd = t >= lastTick();
        data = await api(`${runUrl(run)}/world`);
        map.load(data);
        renderStatic();
        const shown = atEnd ? lastTick() : t;
        slider.value = String(shown);
        show(shown);
      }
    },
    leave: () => playing && clearInterval(playing),
  };
}

// -- Agent --------------------------------------------------------------------------------
const SPAN = 20;

async function agentPage(run, agent) {
  crumbs([`#/run/${enc(run)}`, run], [`#/agent/${enc(run)}/${enc(agent)}`, agent]);
  const base = `${runUrl(run)}/agents/${enc(agent)}`;
  let info = await api(base);
  let hist = await api(`${base}/steps?start=0&end=0`);
  let end = hist.ticks.length ? hist.ticks[hist.ticks.length - 1] : 0;
  const profile = h("table", { class: "kv", id: "profile" });
  const skillsCanvas = h("canvas", { id: "skills-over-time" });
  const active = h("div", { class: "chips", id: "skills-active" });
  const timeline = h("div", { id: "timeline" });
  const range = h("span", { class: "muted", id: "timeline-range" });
  const prompt = h("div", { id: "prompt" }, h("p", { class: "muted" }, "Choose “prompt” on a step."));
  const counter = h("span", { id: "tick-counter" });
  const earlier = h("button", { onclick: () => { end = Math.max(0, end - SPAN); loadSteps(); } }, "← earlier");
  const later = h("button", { onclick: () => { end += SPAN; loadSteps(); } }, "later →");
  page.replaceChildren(
    h("h1", {}, agent), h("p", {}, counter),
    h("div", { class: "grid" },
      h("div", { class: "card" }, h("h2", {}, "Profile"), profile),
      h("div", { class: "card" }, h("h2", {}, "Skills over time"), active, skillsCanvas),
      interviewBox(base)),
    h("div", { class: "grid", style: "margin-top:14px" },
      h("div", { class: "card" }, h("h2", {}, "Timeline"),
        h("div", { class: "toolbar" }, earlier, later, range), timeline),
      h("div", { class: "card" }, h("h2", {}, "Prompt"), prompt)));

  profile.replaceChildren(...Object.entries(info.profile).map(([k, v]) =>
    h("tr", {}, h("td", {}, k), h("td", {}, typeof v === "object" ? JSON.stringify(v) : String(v)))));

  function renderSkills() {
    active.replaceChildren(...(info.skills.active || []).map((s) => h("span", {}, s)));
    const n = Math.max(1, info.run.ticks_done, ...hist.ticks.map((t) => t + 1));
    const names = [...new Set(hist.skills_over_time.flatMap((c) => c.active))];
    const rows = names.map((s) => {
      const values = new Array(n).fill(0);
      hist.skills_over_time.forEach((c, i) => {
        const until = i + 1 < hist.skills_over_time.length ? hist.skills_over_time[i + 1].tick : n;
        if (c.active.includes(s)) for (let t = c.tick; t < until && t < n; t++) values[t] = 1;
      });
      return { label: s, values };
    });
    window.charts.heatMap(skillsCanvas, rows);
  }

  async function loadSteps() {
    const start = Math.max(0, end - SPAN + 1);
    hist = await api(`${base}/steps?start=${start}&end=${end}`);
    range.textContent = `ticks ${start}-${end} of ${hist.steps_total} steps`;
    earlier.disabled = start === 0;
    later.disabled = !hist.ticks.length || end >= hist.ticks[hist.ticks.length - 1];
    timeline.replaceChildren(...hist.steps.slice().reverse().map((s) => stepCard(s, showPrompt)));
    if (!hist.steps.length) timeline.append(h("p", { class: "muted" }, "No steps in these ticks."));
    counter.textContent = `tick ${info.run.ticks_done} done · ${info.run.state} · ${hist.steps_total} steps`;
    counter.dataset.ticks = String(info.run.ticks_done);
    setLive(info.run.state);
    renderSkills();
  }

  async function showPrompt(tick) {
    try {
      const p = await api(`${base}/prompt?tick=${tick}`);
      prompt.replaceChildren(h("p", {}, `tick ${p.tick} · ${p.time} · system ${p.system_sha}`),
        h("div", { class: "label" }, "system prompt"), h("pre", { id: "prompt-system" }, p.system),
        h("div", { class: "label" }, "user message"), h("pre", { id: "prompt-user" }, p.user));
    } catch (err) {
      prompt.replaceChildren(h("p", { class: "error" }, err.message));
    }
  }

  await loadSteps();
  return {
    poll: async () => {
      const p = await api(`${runUrl(run)}/status`);
      if (p.ticks_done !== info.run.ticks_done || p.state !== info.run.state) {
        const following = !hist.ticks.length || end >= hist.ticks[hist.ticks.length - 1];
        info = await api(base);
        if (following) end = Math.max(end, p.ticks_done - 1);
        await loadSteps();
      }
    },
  };
}

function stepCard(s, showPrompt) {
  const label = (t) => h("div", { class: "label" }, t);
  return h("div", { class: "step" + (s.skipped ? " skipped" : ""), "data-tick": s.tick },
    h("h3", {}, `tick ${s.tick} · ${s.time.replace("T", " ")} · `,
      h("span", { class: "action" }, s.action || "(no action)"), " ",
      s.system_sha ? h("button", { class: "show-prompt", onclick: () => showPrompt(s.tick) }, "prompt") : null),
    s.observation ? [label("observation"), h("pre", { class: "observation" }, s.observation)] : null,
    s.skill_hooks ? [label("skill hooks"), h("pre", { class: "skill-hooks" }, s.skill_hooks)] : null,
    s.calls.length ? [label(`tool calls (${s.calls.length})`), ...s.calls.map((c) =>
      h("details", { class: "call" }, h("summary", {}, `${c.tool} ${c.args || ""}`.slice(0, 160)),
        h("pre", {}, `args: ${c.args}\n\nresult: ${c.result}`)))] : null,
    s.memory.length ? [label("memory"), h("ul", { class: "plain memory" },
      s.memory.map((m) => h("li", {}, `${m.kind}: ${m.text}`)))] : null,
    h("div", { class: "muted" }, `${s.model_calls} model calls · ${s.usage.prompt_tokens || 0}+` +
      `${s.usage.completion_tokens || 0} tokens · ${s.elapsed_ms} ms` + (s.limitation ? ` · ${s.limitation}` : "")));
}

function interviewBox(base) {
  const q = h("textarea", { id: "interview-question", rows: 3, style: "width:100%" });
  q.value = "How is your day going?";
  const out = h("div", { id: "interview-answer" });
  const ask = h("button", { id: "interview-ask" }, "Ask");
  ask.addEventListener("click", async () => {
    ask.disabled = true;
    out.replaceChildren(h("p", { class: "muted" }, "Asking… (on a scratch copy; nothing in the run changes)"));
    try {
      const r = await api(`${base}/interview`, { method: "POST",
        headers: { "Content-Type": "application/json" }, body: JSON.stringify({ question: q.value }) });
      out.replaceChildren(h("pre", { class: "answer" }, r.answer || "(no answer)"),
        h("p", { class: "muted" }, `at tick ${r.tick} · environment ${r.environment} · model ${r.model}`),
        ...r.problems.map((p) => h("p", { class: "error" }, p)));
    } catch (err) {
      out.replaceChildren(h("p", { class: "error" }, err.message));
    }
    ask.disabled = false;
  });
  return h("div", { class: "card" }, h("h2", {}, "Interview"),
    h("p", { class: "muted" }, "Ask this agent a question in read-only mode."), q,
    h("div", { class: "toolbar" }, ask), out);
}

// -- Router -------------------------------------------------------------------------------
async function route() {
  if (current && current.leave) current.leave();
  current = null;
  clearInterval(timer);
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  try {
    if (parts[0] === "run" && parts[1]) current = await runPage(parts[1]);
    else if (parts[0] === "study" && parts[1]) current = await studyPage(parts[1]);
    else if (parts[0] === "world" && parts[1]) current = await worldPage(parts[1]);
    else if (parts[0] === "agent" && parts[1] && parts[2]) current = await agentPage(parts[1], parts[2]);
    else current = await runsPage();
  } catch (err) {
    showError(err);
    return;
  }
  document.body.dataset.page = parts[0] || "runs";
  // When the page's first render ended, in ms since navigation (read by bench/view.py).
  document.body.dataset.renderedMs = performance.now().toFixed(1);
  let busy = false;
  const mine = current;
  timer = setInterval(async () => {
    if (busy || current !== mine || !mine.poll) return;
    busy = true;
    try { await mine.poll(); } catch (err) { /* a missed poll is retried next time */ }
    busy = false;
  }, POLL_MS);
}

window.addEventListener("hashchange", route);
route();

// Calls, tokens and errors per model (a model per group) and per server (base_urls), from
// metrics.json; nothing when the run has one model on one server.
function modelsCard(metrics) {
  const model = (metrics && metrics.model) || {};
  const rows = [];
  for (const [name, m] of Object.entries(model.by_model || {})) rows.push([`model ${name}`, m]);
  for (const [url, m] of Object.entries(model.servers || {})) rows.push([`server ${url}`, m]);
  for (const [name, m] of Object.entries(model.by_model || {}))
    for (const [url, s] of Object.entries(m.servers || {})) rows.push([`${name} @ ${url}`, s]);
  if (!rows.length) return h("span", {});
  const cell = (v) => h("td", {}, String(v));
  return h("div", { class: "card", id: "models", style: "margin-top:14px" },
    h("h2", {}, "Models and servers"),
    h("table", {},
      h("tr", {}, ...["", "calls", "tokens", "errors", "retries", "p50 s"].map((t) => h("th", {}, t))),
      ...rows.map(([label, m]) => h("tr", {}, cell(label), cell(m.calls), cell(m.total_tokens),
        cell(m.errors), cell(m.retries),
        cell(m.latency && m.latency.p50 != null ? m.latency.p50.toFixed(3) : "-")))));
}
