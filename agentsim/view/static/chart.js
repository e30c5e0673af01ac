// Small canvas charts for the viewer: lines over ticks with event markers, a heat map, bars.
// Hand-written so that the viewer ships without a build step or a fetched library.
"use strict";

const PALETTE = ["#2f6fde", "#e8710a", "#1a7f37", "#b3261e", "#8250df", "#9a6700",
  "#0a7ea4", "#d63384", "#6b7380", "#2da44e", "#bf8700", "#5a32a3"];
const MARKER_COLORS = { intervention: "#b3261e", survey: "#8250df", reload: "#9a6700" };

// Size the canvas backing store to its CSS box (sharp on high-DPI screens).
function fitCanvas(canvas, height) {
  const dpr = window.devicePixelRatio || 1;
  const width = canvas.clientWidth || 600;
  canvas.style.height = height + "px";
  canvas.width = Math.round(width * dpr);
  canvas.height = Math.round(height * dpr);
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, width, height);
  return { ctx, width, height };
}

function niceMax(v) {
  if (v <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function fmt(v) {
  if (Math.abs(v) >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (Math.abs(v) >= 1e3) return (v / 1e3).toFixed(1) + "k";
  return String(Math.round(v * 100) / 100);
}

// series: [{label, values}], markers: [{tick, kind, label}]; x is the tick index. A value
// of null (a tick without one) leaves a gap; negative values extend the axis below 0.
function lineChart(canvas, legend, series, markers, height = 180) {
  const { ctx, width } = fitCanvas(canvas, height);
  const pad = { l: 44, r: 10, t: 10, b: 22 };
  const n = Math.max(1, ...series.map((s) => s.values.length));
  const all = series.flatMap((s) => s.values).filter((v) => v !== null);
  const ymax = niceMax(Math.max(0, ...all));
  const low = Math.min(0, ...all), ymin = low < 0 ? -niceMax(-low) : 0;
  const x = (t) => pad.l + (n <= 1 ? 0.5 : t / (n - 1)) * (width - pad.l - pad.r);
  const y = (v) => height - pad.b - ((v - ymin) / (ymax - ymin)) * (height - pad.t - pad.b);
  ctx.strokeStyle = "#d9dde3"; ctx.fillStyle = "#6b7380"; ctx.font = "11px system-ui";
  ctx.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const v = ymin + ((ymax - ymin) * i) / 4;
    ctx.beginPath(); ctx.moveTo(pad.l, y(v)); ctx.lineTo(width - pad.r, y(v)); ctx.stroke();
    ctx.fillText(fmt(v), 4, y(v) + 4);
  }
  const step = Math.max(1, Math.ceil(n / 10));
  for (let t = 0; t < n; t += step) ctx.fillText(String(t), x(t) - 3, height - 6);
  for (const m of markers || []) {
    ctx.strokeStyle = MARKER_COLORS[m.kind] || "#6b7380";
    ctx.setLineDash([4, 3]);
    ctx.beginPath(); ctx.moveTo(x(m.tick), pad.t); ctx.lineTo(x(m.tick), height - pad.b); ctx.stroke();
    ctx.setLineDash([]);
  }
  series.forEach((s, i) => {
    ctx.strokeStyle = PALETTE[i % PALETTE.length]; ctx.lineWidth = 1.6;
    ctx.beginPath();
    let drawing = false;
    s.values.forEach((v, t) => {
      if (v === null) { drawing = false; return; }
      drawing ? ctx.lineTo(x(t), y(v)) : ctx.moveTo(x(t), y(v));
      drawing = true;
    });
    ctx.stroke();
    if (n === 1 && s.values[0] !== null) {
      ctx.fillStyle = ctx.strokeStyle; ctx.fillRect(x(0) - 2, y(s.values[0]) - 2, 4, 4);
    }
  });
  if (legend) {
    legend.replaceChildren(...series.map((s, i) => swatch(PALETTE[i % PALETTE.length], s.label)));
    for (const kind of new Set((markers || []).map((m) => m.kind)))
      legend.append(swatch(MARKER_COLORS[kind], kind + " (dashed)"));
  }
}

function swatch(color, label) {
  const span = document.createElement("span");
  const i = document.createElement("i");
  i.style.background = color;
  span.append(i, label);
  return span;
}

// rows: [{label, values}] drawn as a grid of cells shaded by value (e.g. skills per tick).
function heatMap(canvas, rows, height) {
  const h = height || Math.max(60, 16 * rows.length + 24);
  const { ctx, width } = fitCanvas(canvas, h);
  const labelW = 190, n = Math.max(1, ...rows.map((r) => r.values.length));
  const cw = (width - labelW - 6) / n, ch = 16;
  const vmax = Math.max(1, ...rows.flatMap((r) => r.values));
  ctx.font = "11px system-ui";
  rows.forEach((r, j) => {
    ctx.fillStyle = "#1d2430";
    ctx.fillText(r.label.length > 30 ? r.label.slice(0, 29) + "…" : r.label, 2, j * ch + 12);
    r.values.forEach((v, t) => {
      if (!v) return;
      ctx.fillStyle = `rgba(47,111,222,${0.15 + (0.85 * v) / vmax})`;
      ctx.fillRect(labelW + t * cw, j * ch + 2, Math.max(1, cw - 1), ch - 3);
    });
  });
  ctx.fillStyle = "#6b7380";
  const step = Math.max(1, Math.ceil(n / 10));
  for (let t = 0; t < n; t += step) ctx.fillText(String(t), labelW + t * cw, rows.length * ch + 14);
}

window.charts = { fitCanvas, lineChart, heatMap, swatch, PALETTE, fmt };
