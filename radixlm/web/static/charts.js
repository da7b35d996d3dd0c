// Small live charts: one SVG line per series, the last HISTORY samples.
import { el, svgEl } from "./app.js";

const HISTORY = 60, W = 220, H = 60;
const series = new Map();

export function record(name, value, unit = "") {
  if (typeof value !== "number" || !Number.isFinite(value)) return;
  if (!series.has(name)) {
    const box = el("div", { class: "chart", "data-series": name });
    box.append(el("span", {}, name), svgEl("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}` }));
    document.getElementById("charts").append(box);
    series.set(name, { values: [], box, unit });
  }
  const s = series.get(name);
  s.values.push(value);
  if (s.values.length > HISTORY) s.values.shift();
  draw(name, s);
}

function draw(name, s) {
  const max = Math.max(...s.values, 1e-9);
  const step = W / (HISTORY - 1);
  const points = s.values.map((v, i) => `${(i * step).toFixed(1)},${(H - 14 - (v / max) * (H - 20)).toFixed(1)}`);
  const svg = s.box.querySelector("svg");
  const last = s.values[s.values.length - 1];
  svg.replaceChildren(
    svgEl("polyline", { points: points.join(" "), fill: "none", stroke: "#3b6fd8", "stroke-width": 1.5 }),
    svgEl("text", { x: 2, y: H - 2 }, `now ${format(last)}${s.unit}  max ${format(max)}${s.unit}`),
  );
}

export function format(v) {
  if (Math.abs(v) >= 1000) return v.toFixed(0);
  if (Math.abs(v) >= 10) return v.toFixed(1);
  return v.toFixed(3).replace(/\.?0+$/, "") || "0";
}

// Prometheus text -> {name: value} of the unlabelled-by-bucket samples (labels dropped).
export function parseMetrics(text) {
  const out = {};
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#") || line.includes("_bucket{")) continue;
    const match = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/);
    if (match) out[match[1] + (match[2] && match[2].includes("finish_reason") ? match[2] : "")] = Number(match[3]);
  }
  return out;
}
