// The server view: figures, charts, the running batch and the radix tree, polled once a second
// while the tab is open.
import { api, el, errorText, setStatus, svgEl } from "./app.js";
import { format, parseMetrics, record } from "./charts.js";
import { treeLayout } from "./layout.js";

const POLL_MS = 1000, NW = 120, NH = 46;
let timer = null, metricsOn = true;
let previous = null;

function figure(label, text) {
  const box = el("div", { class: "figure" });
  box.append(el("b", {}, text), el("span", {}, label));
  return box;
}

function showFigures(s) {
  const kvTotal = s.kv_total || 1;
  document.getElementById("figures").replaceChildren(
    figure("running requests", String(s.num_running)),
    figure("queued", String(s.num_queued + (s.num_grammar_queue || 0))),
    figure("KV held by requests", `${s.kv_used} / ${kvTotal}`),
    figure("KV in prefix cache", `${s.kv_cached} (${s.kv_evictable} evictable)`),
    figure("cache hit rate", format(100 * (s.cache_hit_rate || 0)) + " %"),
    figure("evicted tokens", String(s.cache_evicted_tokens || 0)),
    figure("decode tok/s", format(s.gen_throughput || 0)),
    figure("tree nodes", String(s.tree.nodes.length - 1) + (s.tree.truncated ? "+" : "")),
  );
  record("KV used %", (100 * s.kv_used) / kvTotal);
  record("KV cached %", (100 * s.kv_cached) / kvTotal);
  record("running", s.num_running);
  record("queued", s.num_queued);
  record("decode tok/s", s.gen_throughput || 0);
  record("cache hit %", 100 * (s.cache_hit_rate || 0));
  record("evicted tokens", s.cache_evicted_tokens || 0);
}

function showBatch(batch) {
  const rows = batch.map((r) => {
    const row = el("tr");
    row.append(el("td", {}, r.rid), el("td", {}, String(r.prompt)), el("td", {}, String(r.output)), el("td", {}, String(r.cached)));
    return row;
  });
  document.querySelector("#batch tbody").replaceChildren(...rows);
}

function showTree(tree) {
  const svg = document.getElementById("tree");
  const nodes = tree.nodes;
  const pos = treeLayout(nodes.map((n) => n.parent));
  const width = (Math.max(0, ...pos.map((p) => p.x)) + 1) * (NW + 10);
  const height = (Math.max(0, ...pos.map((p) => p.y)) + 1) * (NH + 24);
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("height", Math.min(Math.max(height, 80), 600));
  svg.dataset.nodes = String(nodes.length - 1);
  const at = (i) => ({ x: pos[i].x * (NW + 10) + 5, y: pos[i].y * (NH + 24) + 5 });
  const parts = [];
  nodes.forEach((n, i) => {
    if (n.parent === null) return;
    const a = at(n.parent), b = at(i);
    parts.push(svgEl("line", { x1: a.x + NW / 2, y1: a.y + NH, x2: b.x + NW / 2, y2: b.y, stroke: "#8a93a8" }));
  });
  nodes.forEach((n, i) => {
    const p = at(i);
    const locked = n.lock_ref > 0;
    const g = svgEl("g", { class: "tnode" });
    const title = svgEl("title", {}, `${n.tokens} tokens, lock_ref ${n.lock_ref}, last access ${n.last_access}` +
      (n.held_by.length ? `\nheld by ${n.held_by.join(", ")}` : "") + `\n${n.text}`);
    g.append(title, svgEl("rect", { x: p.x, y: p.y, width: NW, height: NH, rx: 5, fill: locked ? "#fde7c7" : "#e8effd", stroke: locked ? "#c07a1a" : "#3b6fd8" }));
    const label = i === 0 ? "root" : n.text.replace(/\s+/g, " ").slice(0, 18);
    g.append(svgEl("text", { x: p.x + 4, y: p.y + 14 }, label));
    g.append(svgEl("text", { x: p.x + 4, y: p.y + 28 }, `${n.tokens} tok, lock ${n.lock_ref}`));
    if (n.held_by.length) g.append(svgEl("text", { x: p.x + 4, y: p.y + 41 }, `held: ${n.held_by.length}`));
    parts.push(g);
  });
  svg.replaceChildren(...parts);
  document.getElementById("tree-note").textContent =
    "(blue: evictable cache; orange: locked by a running request or program" + (tree.truncated ? "; truncated)" : ")");
}

async function showMetrics() {
  if (!metricsOn) return;
  const response = await api("/metrics");
  const box = document.getElementById("metrics");
  if (response.status === 404) {
    metricsOn = false;
    box.textContent = "metrics are off: start the server with --enable-metrics";
    return;
  }
  const m = parseMetrics(await response.text());
  const mean = (name) => {
    const count = m[`radixlm:${name}_count`];
    return count ? m[`radixlm:${name}_sum`] / count : 0;
  };
  record("mean TTFT s", mean("time_to_first_token_seconds"));
  record("mean TPOT s", mean("time_per_output_token_seconds"));
  if (previous) record("generated tok/s (metrics)", (m["radixlm:generation_tokens_total"] - previous) / (POLL_MS / 1000));
  previous = m["radixlm:generation_tokens_total"];
  const table = el("table");
  for (const [name, value] of Object.entries(m)) {
    const row = el("tr");
    row.append(el("td", {}, name), el("td", {}, format(value)));
    table.append(row);
  }
  box.replaceChildren(table);
}

export async function pollOnce() {
  const response = await api("/ui/api/server");
  if (!response.ok) {
    setStatus(await errorText(response));
    return;
  }
  const s = await response.json();
  showFigures(s);
  showBatch(s.batch);
  showTree(s.tree);
  await showMetrics();
  document.getElementById("server").dataset.polls = String(Number(document.getElementById("server").dataset.polls || 0) + 1);
}

async function loop() {
  try {
    await pollOnce();
  } catch (e) {
    setStatus("server view: " + e.message);
  }
  timer = setTimeout(loop, POLL_MS);
}

export function initServer() {
  document.addEventListener("tab", (event) => {
    clearTimeout(timer);
    timer = null;
    if (event.detail === "server") loop();
  });
}
