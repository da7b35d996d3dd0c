// The playground's shell: tabs, the API key (asked once, kept in sessionStorage) and fetch helpers.
// Every text the model or the server sends is put in the page with textContent, never as HTML.
import { initChat } from "./chat.js";
import { initProgram } from "./program.js";
import { initServer } from "./server.js";

const KEY = "radixlm-api-key";
let keyWaiters = [];

export function el(tag, attrs = {}, text = "") {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text) node.textContent = text;
  return node;
}

export function svgEl(tag, attrs = {}, text = "") {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text) node.textContent = text;
  return node;
}

export function setStatus(text) {
  document.getElementById("status").textContent = text;
}

function askForKey() {
  const form = document.getElementById("key-form");
  form.hidden = false;
  document.getElementById("key-input").focus();
  return new Promise((resolve) => keyWaiters.push(resolve));
}

// fetch() with the API key; a 401 asks for the key once and retries.
export async function api(path, options = {}) {
  for (;;) {
    const headers = { ...(options.headers || {}) };
    const key = sessionStorage.getItem(KEY);
    if (key) headers["Authorization"] = "Bearer " + key;
    if (options.body && !headers["Content-Type"]) headers["Content-Type"] = "application/json";
    const response = await fetch(path, { ...options, headers });
    if (response.status !== 401) return response;
    sessionStorage.removeItem(KEY);
    await askForKey();
  }
}

export async function errorText(response) {
  try {
    const body = await response.json();
    return (body.error && body.error.message) || JSON.stringify(body);
  } catch {
    return "HTTP " + response.status;
  }
}

function initTabs() {
  const tabs = document.querySelectorAll(".tab");
  for (const tab of tabs) {
    tab.addEventListener("click", () => {
      for (const t of tabs) t.classList.toggle("active", t === tab);
      for (const page of document.querySelectorAll(".page")) page.hidden = page.id !== tab.dataset.tab;
      document.dispatchEvent(new CustomEvent("tab", { detail: tab.dataset.tab }));
    });
  }
}

function initKeyForm() {
  document.getElementById("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(KEY, document.getElementById("key-input").value.trim());
    document.getElementById("key-form").hidden = true;
    const waiters = keyWaiters;
    keyWaiters = [];
    for (const resolve of waiters) resolve();
  });
}

async function start() {
  initTabs();
  initKeyForm();
  const response = await api("/v1/models");
  if (response.ok) {
    const models = await response.json();
    document.getElementById("model").textContent = models.data[0].id;
  }
  initChat();
  initProgram();
  initServer();
  document.body.dataset.ready = "1";
}

start();
