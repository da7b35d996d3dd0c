// The program page: runs a request graph (POST /ui/api/program, NDJSON) and fills its drawing in
// node by node. The graph comes from an example or is pasted; no Python is ever sent.
import { api, el, errorText, svgEl } from "./app.js";
import { treeLayout } from "./layout.js";

const W = 170, H = 64;
let examples = [];

function opLabel(node) {
  if (!node.op) return "text";
  return node.op.type + (node.op.name ? " " + node.op.name : "");
}

function drawGraph(graph) {
  const svg = document.getElementById("graph");
  svg.replaceChildren();
  const pos = treeLayout(graph.nodes.map((n) => n.parent));
  const width = (Math.max(0, ...pos.map((p) => p.x)) + 1) * (W + 20);
  const height = (Math.max(0, ...pos.map((p) => p.y)) + 1) * (H + 40) + 20;
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("height", Math.min(height, 520));
  const at = (i) => ({ x: pos[i].x * (W + 20) + 10, y: pos[i].y * (H + 40) + 10 });
  for (const node of graph.nodes) {
    const to = at(node.id);
    if (node.parent !== null) {
      const from = at(node.parent);
      svg.append(svgEl("line", { x1: from.x + W / 2, y1: from.y + H, x2: to.x + W / 2, y2: to.y, stroke: "#8a93a8" }));
    }
    for (const seg of node.extend) {
      if (seg.var === undefined) continue;
      const from = at(seg.node);
      // a variable's value flowing into a later node: a dashed curve under the two boxes
      const [x1, y1, x2, y2] = [from.x + W / 2, from.y + H, to.x + W / 2, to.y + H];
      const d = `M ${x1} ${y1} Q ${(x1 + x2) / 2} ${Math.max(y1, y2) + 34} ${x2} ${y2}`;
      svg.append(svgEl("path", { d, fill: "none", stroke: "#c07a1a", "stroke-dasharray": "4 3" }));
    }
  }
  for (const node of graph.nodes) {
    const p = at(node.id);
    const g = svgEl("g", { class: "gnode", "data-node": node.id, "data-state": "waiting" });
    g.append(svgEl("rect", { x: p.x, y: p.y, width: W, height: H, rx: 6, fill: "#eef0f4", stroke: "#8a93a8" }));
    g.append(svgEl("text", { x: p.x + 6, y: p.y + 15, "font-weight": "bold" }, `#${node.id} ${opLabel(node)}`));
    g.append(svgEl("text", { x: p.x + 6, y: p.y + 32, class: "value" }, "waiting"));
    g.append(svgEl("text", { x: p.x + 6, y: p.y + 50, class: "meta" }, ""));
    svg.append(g);
  }
}

function markDone(id, value, meta) {
  const g = document.querySelector(`#graph g[data-node="${id}"]`);
  if (!g) return;
  g.dataset.state = "done";
  g.querySelector("rect").setAttribute("fill", "#dff3e4");
  g.querySelector("rect").setAttribute("stroke", "#17803d");
  const text = value === undefined ? "context ready" : String(value);
  g.querySelector(".value").textContent = text.length > 26 ? text.slice(0, 25) + "…" : text || "(empty)";
  if (meta && meta.choices) g.querySelector(".meta").textContent = `${meta.choices.length} choices scored`;
  else if (meta) g.querySelector(".meta").textContent = `${meta.completion_tokens} tok, ${meta.cached_tokens ?? 0} cached`;
}

function addRow(event) {
  const meta = event.meta_info || {};
  const row = el("tr");
  row.append(el("td", {}, String(event.node)), el("td", {}, event.name || ""), el("td", { class: "value" }, String(event.value)));
  const tokens = meta.choices ? `${meta.choices.length} choices scored` : `${meta.prompt_tokens} in / ${meta.completion_tokens} out`;
  row.append(el("td", {}, tokens), el("td", {}, meta.choices ? "-" : String(meta.cached_tokens ?? 0)));
  document.querySelector("#node-table tbody").append(row);
}

async function run() {
  const status = document.getElementById("program-status");
  let graph;
  try {
    graph = JSON.parse(document.getElementById("graph-json").value);
  } catch (e) {
    status.textContent = "not JSON: " + e.message;
    return;
  }
  drawGraph(graph);
  document.querySelector("#node-table tbody").replaceChildren();
  const button = document.getElementById("run-program");
  button.disabled = true;
  status.textContent = "running";
  document.getElementById("graph").dataset.state = "running";
  try {
    const response = await api("/ui/api/program", { method: "POST", body: JSON.stringify({ graph }) });
    if (!response.ok) throw new Error(await errorText(response));
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n")) >= 0) {
        const event = JSON.parse(buffer.slice(0, cut));
        buffer = buffer.slice(cut + 1);
        if (event.event === "node") {
          markDone(event.node, event.value, event.meta_info);
          // a node ran on its parents' contexts, so those are complete too
          for (let p = graph.nodes[event.node].parent; p !== null; p = graph.nodes[p].parent)
            if (document.querySelector(`#graph g[data-node="${p}"]`).dataset.state !== "done") markDone(p);
          addRow(event);
        } else if (event.event === "error") throw new Error(event.message);
        else if (event.event === "done") {
          for (const node of graph.nodes) if (!node.op || node.op.type === "prefill") markDone(node.id);
          status.textContent = "done";
          document.getElementById("graph").dataset.state = "done";
        }
      }
    }
  } catch (e) {
    status.textContent = "error: " + e.message;
    document.getElementById("graph").dataset.state = "error";
  } finally {
    button.disabled = false;
  }
}

function pick(index) {
  const example = examples[index];
  document.getElementById("source").textContent = example.source;
  document.getElementById("graph-json").value = JSON.stringify(example.graph, null, 1);
  drawGraph(example.graph);
}

export async function initProgram() {
  document.getElementById("run-program").addEventListener("click", run);
  const select = document.getElementById("example");
  select.addEventListener("change", () => pick(Number(select.value)));
  const response = await fetch("/ui/examples.json");
  examples = await response.json();
  examples.forEach((e, i) => select.append(el("option", { value: i }, e.name)));
  pick(0);
}
