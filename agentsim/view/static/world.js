// The world view: places on a plane and agents as dots at tick T, replayed from the run's
// moves on the client, so that moving the slider one tick only applies that tick's moves.
"use strict";

const CATEGORY_COLORS = {};
function categoryColor(cat) {
  if (!(cat in CATEGORY_COLORS)) {
    const n = Object.keys(CATEGORY_COLORS).length;
    CATEGORY_COLORS[cat] = window.charts.PALETTE[n % window.charts.PALETTE.length];
  }
  return CATEGORY_COLORS[cat];
}

// A well-mixed number in [0, 1) from an integer (a 32-bit integer hash).
function hash01(i) {
  let x = Math.imul(i ^ 0x9e3779b9, 0x85ebca6b);
  x = Math.imul(x ^ (x >>> 13), 0xc2b2ae35);
  return ((x ^ (x >>> 16)) >>> 0) / 4294967296;
}

class WorldMap {
  // data: {places: [{id, x, y, category}], agents: [id], start: [place index], moves: flat
  // [tick, agent index, place index (-1 in transit)]}
  constructor(canvas, data) {
    this.canvas = canvas;
    this.load(data);
  }

  load(data) {
    this.places = data.places;
    this.agents = data.agents;
    this.start = Int32Array.from(data.start);
    this.moves = data.moves;
    this.pos = Int32Array.from(this.start);
    this.last = Int32Array.from(this.start); // the place an agent in transit left
    this.applied = 0;
    this.tick = -1;
    // A fixed offset per agent in a disc around its place, from a hash of its index: dots
    // do not jump around a place as others come and go.
    const n = this.agents.length;
    this.dx = new Float32Array(n);
    this.dy = new Float32Array(n);
    for (let i = 0; i < n; i++) {
      const r = Math.sqrt(hash01(2 * i)), a = 2 * Math.PI * hash01(2 * i + 1);
      this.dx[i] = Math.cos(a) * r;
      this.dy[i] = Math.sin(a) * r;
    }
  }

  // The state at the end of tick t: replay from the start when going back.
  setTick(t) {
    if (t < this.tick) {
      this.pos.set(this.start);
      this.last.set(this.start);
      this.applied = 0;
    }
    const m = this.moves;
    while (3 * this.applied < m.length && m[3 * this.applied] <= t) {
      const a = m[3 * this.applied + 1], p = m[3 * this.applied + 2];
      if (p < 0 && this.pos[a] >= 0) this.last[a] = this.pos[a];
      this.pos[a] = p;
      this.applied++;
    }
    this.tick = t;
    this.draw();
    return this.occupancy();
  }

  occupancy() {
    const counts = new Int32Array(this.places.length);
    let transit = 0;
    for (const p of this.pos) p >= 0 ? counts[p]++ : transit++;
    return { counts, transit };
  }

  digest() {
    let h = 2166136261;
    for (const p of this.pos) h = Math.imul(h ^ (p + 1), 16777619) >>> 0;
    return h.toString(16);
  }

  draw() {
    const { ctx, width, height } = window.charts.fitCanvas(this.canvas, this.canvas._h || 520);
    if (!this.places.length) {
      ctx.fillStyle = "#6b7380";
      ctx.fillText("No module of this run draws places.", 20, 30);
      return;
    }
    const xs = this.places.map((p) => p.x), ys = this.places.map((p) => p.y);
    const x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
    const pad = 30;
    const s = Math.min((width - 2 * pad) / (x1 - x0 || 1), (height - 2 * pad) / (y1 - y0 || 1));
    // Centred: the plane keeps its aspect ratio.
    const ox = (width - 2 * pad - (x1 - x0) * s) / 2, oy = (height - 2 * pad - (y1 - y0) * s) / 2;
    const px = (x) => pad + ox + (x - x0) * s, py = (y) => height - pad - oy - (y - y0) * s;
    // Many agents need a wider disc around each place to stay distinguishable.
    const n = this.agents.length;
    const spread = Math.max(6, Math.min(30, s * 0.25 * Math.max(1, Math.sqrt(n) / 30)));
    ctx.font = "10px system-ui";
    for (const p of this.places) {
      ctx.fillStyle = categoryColor(p.category) + "33";
      ctx.beginPath(); ctx.arc(px(p.x), py(p.y), spread + 3, 0, 2 * Math.PI); ctx.fill();
      if (this.places.length <= 80) { ctx.fillStyle = "#6b7380"; ctx.fillText(p.id, px(p.x) + spread + 4, py(p.y) + 3); }
    }
    const size = n > 2000 ? 1.6 : n > 500 ? 3 : 5;
    ctx.globalAlpha = n > 2000 ? 0.55 : 1;
    for (let i = 0; i < n; i++) {
      const here = this.pos[i], at = this.places[here >= 0 ? here : this.last[i]];
      if (!at) continue;
      ctx.fillStyle = here >= 0 ? categoryColor(at.category) : "#9aa1ab";
      const k = here >= 0 ? spread : spread + 8;
      ctx.fillRect(px(at.x) + this.dx[i] * k - size / 2, py(at.y) + this.dy[i] * k - size / 2, size, size);
    }
    ctx.globalAlpha = 1;
    this.canvas.dataset.tick = String(this.tick);
    this.canvas.dataset.digest = this.digest();
  }
}

// The follow graph around the first agent: up to `limit` agents reached from it through
// links (either way), on a circle in the order they were reached.
function drawGraph(canvas, agents, edges, limit = 150) {
  const { ctx, width, height } = window.charts.fitCanvas(canvas, 320);
  const near = new Map();
  for (const [a, b] of edges) {
    if (!near.has(a)) near.set(a, []);
    if (!near.has(b)) near.set(b, []);
    near.get(a).push(b);
    near.get(b).push(a);
  }
  const order = new Map(); // agent index -> slot on the circle
  for (let root = 0; root < agents.length && order.size < limit; root++) {
    if (order.has(root)) continue;
    const queue = [root];
    order.set(root, order.size);
    while (queue.length && order.size < limit) {
      for (const other of near.get(queue.shift()) || []) {
        if (order.size >= limit) break;
        if (!order.has(other)) { order.set(other, order.size); queue.push(other); }
      }
    }
  }
  const n = order.size;
  const cx = width / 2, cy = height / 2, r = Math.min(cx, cy) - 16;
  const at = (i) => {
    const k = order.get(i);
    return [cx + r * Math.cos((2 * Math.PI * k) / n), cy + r * Math.sin((2 * Math.PI * k) / n)];
  };
  ctx.strokeStyle = "rgba(47,111,222,0.25)";
  let drawn = 0;
  for (const [a, b] of edges) {
    if (!order.has(a) || !order.has(b)) continue;
    const [ax, ay] = at(a), [bx, by] = at(b);
    ctx.beginPath(); ctx.moveTo(ax, ay); ctx.lineTo(bx, by); ctx.stroke();
    drawn++;
  }
  const groups = {};
  for (const i of order.keys()) {
    const g = agents[i].replace(/-?\d+$/, "");
    ctx.fillStyle = categoryColor("group:" + g);
    groups[g] = ctx.fillStyle;
    const [x, y] = at(i);
    ctx.beginPath(); ctx.arc(x, y, 3, 0, 2 * Math.PI); ctx.fill();
  }
  canvas.dataset.edges = String(drawn);
  return { nodes: n, edges: drawn, groups };
}

// Opinion histograms over ticks: x the tick, y the opinion bin (-1 at the bottom), shade the count.
function drawOpinions(canvas, opinions) {
  const { ctx, width, height } = window.charts.fitCanvas(canvas, 200);
  if (!opinions.length) { ctx.fillStyle = "#6b7380"; ctx.fillText("No opinions logged.", 10, 20); return; }
  const bins = opinions[0].histogram.length, n = opinions.length, pad = 24;
  const cw = (width - pad) / n, ch = (height - pad) / bins;
  const vmax = Math.max(1, ...opinions.flatMap((o) => o.histogram));
  opinions.forEach((o, t) => o.histogram.forEach((v, b) => {
    ctx.fillStyle = `rgba(130,80,223,${v ? 0.1 + (0.9 * v) / vmax : 0})`;
    ctx.fillRect(pad + t * cw, height - pad - (b + 1) * ch, Math.max(1, cw - 1), ch - 1);
  }));
  ctx.strokeStyle = "#e8710a"; ctx.lineWidth = 2; ctx.beginPath();
  opinions.forEach((o, t) => {
    const y = height - pad - ((o.mean + 1) / 2) * (height - pad), x = pad + (t + 0.5) * cw;
    t ? ctx.lineTo(x, y) : ctx.moveTo(x, y);
  });
  ctx.stroke();
  ctx.fillStyle = "#6b7380"; ctx.font = "11px system-ui";
  ctx.fillText("+1", 2, 10); ctx.fillText("-1", 2, height - pad); ctx.fillText("tick →", pad, height - 6);
}

window.world = { WorldMap, drawGraph, drawOpinions, categoryColor };
