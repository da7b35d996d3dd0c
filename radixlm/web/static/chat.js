// The chat page: streams /v1/chat/completions (SSE) into the page as text.
import { api, el, errorText, setStatus } from "./app.js";
import { checkOutput } from "./validate.js";

let history = [];

function value(id) {
  return document.getElementById(id).value;
}

function requestBody() {
  const body = {
    model: document.getElementById("model").textContent || "default",
    messages: [],
    stream: true,
    temperature: Number(value("temperature")),
    top_p: Number(value("top_p")),
    max_tokens: Number(value("max_tokens")),
  };
  if (value("system").trim()) body.messages.push({ role: "system", content: value("system") });
  body.messages.push(...history);
  if (value("tools").trim()) body.tools = JSON.parse(value("tools"));
  const mode = value("mode");
  const constraint = value("constraint");
  if (mode === "json_schema")
    body.response_format = { type: "json_schema", json_schema: { name: "output", schema: JSON.parse(constraint) } };
  else if (mode === "regex") body.regex = constraint;
  else if (mode === "ebnf") body.ebnf = constraint;
  return body;
}

function addMessage(role, text) {
  const box = el("div", { class: "msg " + role });
  box.append(el("span", { class: "role" }, role));
  const content = el("span", { class: "content" });
  content.textContent = text;
  box.append(content);
  document.getElementById("messages").append(box);
  return box;
}

// Yields each `data:` payload of a server-sent event stream.
async function* sseData(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { done, value: chunk } = await reader.read();
    if (done) return;
    buffer += decoder.decode(chunk, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      for (const line of event.split("\n")) if (line.startsWith("data:")) yield line.slice(5).trim();
    }
  }
}

async function send(event) {
  event.preventDefault();
  const text = value("prompt");
  if (!text.trim()) return;
  let body;
  try {
    history.push({ role: "user", content: text });
    body = requestBody();
  } catch (e) {
    history.pop();
    setStatus("bad JSON in tools or schema: " + e.message);
    return;
  }
  document.getElementById("prompt").value = "";
  addMessage("user", text);
  const box = addMessage("assistant", "");
  const content = box.querySelector(".content");
  const button = document.getElementById("send");
  button.disabled = true;
  box.dataset.state = "streaming";
  let answer = "";
  let chunks = 0;
  try {
    const response = await api("/v1/chat/completions", { method: "POST", body: JSON.stringify(body) });
    if (!response.ok) throw new Error(await errorText(response));
    const tools = {};
    for await (const data of sseData(response)) {
      if (data === "[DONE]") break;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new Error(chunk.error.message);
      const delta = (chunk.choices[0] || {}).delta || {};
      if (delta.content) {
        answer += delta.content;
        content.textContent = answer;
        box.dataset.chunks = String(++chunks);
      }
      for (const call of delta.tool_calls || []) {
        const entry = (tools[call.index] = tools[call.index] || { name: "", args: "", node: null });
        if (call.function && call.function.name) entry.name += call.function.name;
        if (call.function && call.function.arguments) entry.args += call.function.arguments;
        entry.node = entry.node || box.appendChild(el("span", { class: "tool" }));
        entry.node.textContent = `tool call: ${entry.name}(${entry.args})`;
      }
    }
    history.push({ role: "assistant", content: answer });
    const verdict = checkOutput(value("mode"), value("constraint"), answer);
    if (verdict) box.append(el("span", { class: "verdict " + (verdict.ok ? "ok" : "bad") }, (verdict.ok ? "✓ " : "✗ ") + verdict.message));
  } catch (e) {
    history.pop();
    box.append(el("span", { class: "verdict bad" }, "error: " + e.message));
  } finally {
    box.dataset.state = "done";
    button.disabled = false;
  }
}

export function initChat() {
  document.getElementById("chat-form").addEventListener("submit", send);
  document.getElementById("prompt").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) send(event);
  });
  document.getElementById("clear").addEventListener("click", () => {
    history = [];
    document.getElementById("messages").replaceChildren();
  });
}
