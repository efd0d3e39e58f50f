// The playground and operator view. It learns this app's routes from its own openapi.json,
// streams chat replies with fetch + ReadableStream, and writes model output as text only.
"use strict";

const mount = new URL("../", document.baseURI); // the page lives at {mount}/ui/
const KEY = "asgi_llm.api_key";
const RATE_WINDOW_MS = 30000; // the request rate shown is the average over this window
const $ = (id) => document.getElementById(id);
const state = { key: sessionStorage.getItem(KEY) || "", routes: null, history: [], abort: null, polls: [] };

function url(path) {
  return new URL(path.replace(/^\//, ""), mount);
}

function call(path, init = {}) {
  const headers = {};
  if (state.key) headers["Authorization"] = "Bearer " + state.key;
  if (init.body !== undefined) headers["Content-Type"] = "application/json";
  return fetch(url(path), { ...init, headers });
}

function notice(text) {
  $("notice").textContent = text || "";
  $("notice").hidden = !text;
}

async function errorText(response) {
  try {
    const body = await response.json();
    const error = body.error;
    return (typeof error === "string" ? error : error && error.message) || JSON.stringify(body);
  } catch (_) {
    return response.status + " " + response.statusText;
  }
}

// --- routes, from the app's own OpenAPI document ---

async function discover() {
  const response = await call("openapi.json");
  if (!response.ok) {
    notice(response.status === 401 ? "This server needs an API key: enter it above." : await errorText(response));
    return null;
  }
  const paths = (await response.json()).paths;
  const byId = {};
  for (const [path, ops] of Object.entries(paths)) for (const op of Object.values(ops)) byId[op.operationId] = path;
  const openai = paths["/chat/completions"] && paths["/models"];
  return {
    protocol: openai ? "openai" : paths["/api/chat"] ? "ollama" : null,
    chat: openai ? "/chat/completions" : "/api/chat",
    models: openai ? "/models" : "/api/tags",
    health: byId.health || null,
    metrics: byId.metrics || null,
    admin: byId.admin_models || null,
  };
}

async function loadModels() {
  const select = $("model");
  const response = await call(state.routes.models);
  if (!response.ok) return notice(await errorText(response));
  const body = await response.json();
  const names = state.routes.protocol === "openai" ? body.data.map((m) => m.id) : body.models.map((m) => m.name);
  const kept = select.value;
  select.replaceChildren(...names.map((name) => new Option(name, name)));
  if (names.includes(kept)) select.value = kept;
}

async function start() {
  notice("");
  state.routes = await discover();
  if (!state.routes) return;
  if (!state.routes.protocol) return notice("This app serves no chat route (OpenAI or Ollama).");
  $("endpoint").textContent = url(state.routes.chat).pathname;
  await loadModels();
  if (!$("operator-view").hidden) refreshOperator();
}

// --- chat ---

function turn(kind, text) {
  const div = document.createElement("div");
  div.className = "turn " + kind;
  if (text !== undefined) div.textContent = text;
  $("log").append(div);
  div.scrollIntoView({ block: "end" });
  return div;
}

function assistantTurn() {
  const div = turn("assistant");
  const details = document.createElement("details");
  details.className = "reasoning";
  details.hidden = true;
  details.open = true;
  const summary = document.createElement("summary");
  summary.textContent = "Reasoning";
  const thought = document.createElement("div");
  thought.className = "thought";
  details.append(summary, thought);
  const answer = document.createElement("div");
  answer.className = "answer";
  div.append(details, answer);
  return { div, details, thought, answer };
}

function meter() {
  const began = performance.now();
  let first = null;
  let count = 0;
  const show = (tokens, seconds) => {
    $("tokens").textContent = String(tokens);
    if (seconds > 0 && tokens > 1) $("tps").textContent = (tokens / seconds).toFixed(1);
  };
  return {
    token() {
      const now = performance.now();
      if (first === null) {
        first = now;
        $("ttft").textContent = ((now - began) / 1000).toFixed(2) + " s";
      }
      count += 1;
      show(count, (now - first) / 1000);
    },
    finish(tokens, seconds) {
      const elapsed = first === null ? 0 : (performance.now() - first) / 1000;
      show(tokens || count, seconds || elapsed);
    },
  };
}

async function* lines(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let at;
    while ((at = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, at).trim();
      buffer = buffer.slice(at + 1);
      if (line) yield line;
    }
  }
  if (buffer.trim()) yield buffer.trim();
}

function requestBody(messages) {
  const model = $("model").value;
  const maxTokens = Number($("max-tokens").value) || 256;
  const temperature = Number($("temperature").value);
  if (state.routes.protocol === "openai") {
    return { model, messages, stream: true, stream_options: { include_usage: true }, max_tokens: maxTokens, temperature };
  }
  return { model, messages, stream: true, options: { num_predict: maxTokens, temperature } };
}

async function streamReply(response, out, tokens) {
  const openai = state.routes.protocol === "openai";
  for await (const line of lines(response)) {
    let data = line;
    if (openai) {
      if (!line.startsWith("data:")) continue;
      data = line.slice(5).trim();
      if (data === "[DONE]") break;
    }
    const chunk = JSON.parse(data);
    if (chunk.error) throw new Error(typeof chunk.error === "string" ? chunk.error : chunk.error.message);
    const delta = openai ? (chunk.choices && chunk.choices[0] && chunk.choices[0].delta) || {} : chunk.message || {};
    const thinking = openai ? delta.reasoning_content : delta.thinking;
    if (thinking) {
      out.details.hidden = false;
      out.thought.append(thinking);
      tokens.token();
    }
    if (delta.content) {
      out.answer.append(delta.content);
      tokens.token();
    }
    if (openai && chunk.usage) tokens.finish(chunk.usage.completion_tokens);
    if (!openai && chunk.done) tokens.finish(chunk.eval_count, chunk.eval_duration / 1e9);
    out.div.scrollIntoView({ block: "end" });
  }
}

async function send(text) {
  const messages = [];
  if ($("system").value.trim()) messages.push({ role: "system", content: $("system").value.trim() });
  messages.push(...state.history, { role: "user", content: text });
  turn("user", text);
  const out = assistantTurn();
  const tokens = meter();
  $("tokens").textContent = "0";
  $("tps").textContent = "–";
  $("ttft").textContent = "–";
  state.abort = new AbortController();
  $("send").disabled = true;
  $("stop").disabled = false;
  try {
    const response = await call(state.routes.chat, {
      method: "POST",
      body: JSON.stringify(requestBody(messages)),
      signal: state.abort.signal,
    });
    if (!response.ok) throw new Error(await errorText(response));
    await streamReply(response, out, tokens);
    state.history.push({ role: "user", content: text }, { role: "assistant", content: out.answer.textContent });
  } catch (error) {
    if (error.name !== "AbortError") turn("error", error.message);
  } finally {
    tokens.finish();
    state.abort = null;
    $("send").disabled = false;
    $("stop").disabled = true;
  }
}

// --- operator view ---

function parseMetrics(text) {
  const samples = [];
  for (const line of text.split("\n")) {
    const m = line.match(/^([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)$/);
    if (!m) continue;
    const labels = {};
    for (const l of (m[2] || "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2].replace(/\\(.)/g, "$1");
    samples.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return samples;
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const [text, className] of cells) {
    const td = document.createElement("td");
    td.textContent = text;
    if (className) td.className = className;
    tr.append(td);
  }
  return tr;
}

// Bytes in human units: 1023 B, 1.5 KiB, 310 MiB, 1.2 GiB.
function size(bytes) {
  if (bytes === null || bytes === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return (unit === 0 || value >= 100 ? Math.round(value) : value.toFixed(1)) + " " + units[unit];
}

function gpuBytes(memory) {
  return memory && memory.gpu ? memory.gpu.reduce((a, b) => a + b, 0) : 0;
}

// "RAM 310 MiB (est. 300 MiB) · GPU 1.2 GiB (est. 1.1 GiB)": what a model holds against its estimate.
function memoryText(m) {
  const actual = m.actual_memory || (m.backend && m.backend.memory) || null;
  const estimate = m.estimated_memory || null;
  if (!actual && !estimate) return m.backend && m.backend.backend === "upstream" ? "held by the upstream" : "–";
  const part = (label, now, est) => {
    if (!now && !est) return label + " 0 B";
    const shown = now === null ? "not loaded" : size(now);
    return label + " " + shown + (est !== null ? " (est. " + size(est) + ")" : "");
  };
  const ram = part("RAM", actual ? actual.ram : null, estimate ? estimate.ram : null);
  const gpu = part("GPU", actual ? gpuBytes(actual) : null, estimate ? gpuBytes(estimate) : null);
  return ram + " · " + gpu;
}

function cacheCell(m) {
  const cache = m.backend && m.backend.prompt_cache;
  if (!cache) return ["–"];
  const td = document.createElement("td");
  const meter = document.createElement("meter");
  meter.max = Math.max(cache.budget, 1);
  meter.value = cache.bytes;
  const text = size(cache.bytes) + " of " + size(cache.budget) + " (" + cache.prompts + " prompts)";
  td.append(meter, " " + text);
  return td;
}

function cells(tr, items) {
  for (const item of items) {
    if (item instanceof HTMLElement) {
      tr.append(item);
      continue;
    }
    const td = document.createElement("td");
    td.textContent = item[0];
    if (item[1]) td.className = item[1];
    tr.append(td);
  }
  return tr;
}

function modelRows(m) {
  const backend = m.backend || {};
  const seq = backend.sequences;
  const health = m.health;
  const faults = health ? health.stalls + " stalls · " + health.faults + " faults" + (health.restarts ? " · " + health.restarts + " restarts" : "") : "–";
  const tr = cells(document.createElement("tr"), [
    [m.id],
    [m.state, "state-" + m.state],
    [m.error || memoryText(m), m.error ? "state-failed" : ""],
    cacheCell(m),
    [seq ? seq.busy + " busy · " + seq.free + " free" : "–"],
    [m.queued === undefined ? "–" : String(m.queued), "num"],
    [faults],
  ]);
  tr.dataset.model = m.id;
  const replicas = (backend.replicas || []).map((r) => {
    const sub = cells(document.createElement("tr"), [
      ["↳ replica " + r.replica, "replica"],
      [r.healthy ? "up" : "down", r.healthy ? "state-ready" : "state-failed"],
      [r.requests + " requests since start"],
      ["–"],
      [r.outstanding + " in flight"],
      ["–", "num"],
      ["–"],
    ]);
    sub.className = "replica-row";
    return sub;
  });
  return [tr, ...replicas];
}

async function showModels() {
  let models = null;
  if (state.routes.admin) {
    const listed = await call(state.routes.admin);
    if (listed.ok) models = (await listed.json()).data; // the operators' list: estimates, queues, faults
  }
  if (!models && state.routes.health) models = (await (await call(state.routes.health)).json()).models;
  $("models-table").tBodies[0].replaceChildren(...(models || []).flatMap(modelRows));
}

function showUsage(samples) {
  const keys = {};
  const add = (key, field, value) => {
    keys[key] = keys[key] || { requests: 0, errors: 0, prompt: 0, completion: 0 };
    keys[key][field] += value;
  };
  const fields = {
    asgi_llm_requests_total: "requests",
    asgi_llm_request_errors_total: "errors",
    asgi_llm_prompt_tokens_total: "prompt",
    asgi_llm_completion_tokens_total: "completion",
  };
  for (const s of samples) if (fields[s.name]) add(s.labels.key || "(no key)", fields[s.name], s.value);
  const rows = Object.entries(keys).map(([key, u]) =>
    row([[key], [String(u.requests), "num"], [String(u.errors), "num"], [String(u.prompt), "num"], [String(u.completion), "num"]]),
  );
  $("usage-table").tBodies[0].replaceChildren(...rows);
}

function showRate(samples) {
  const sum = (name) => samples.filter((s) => s.name === name).reduce((a, s) => a + s.value, 0);
  const total = sum("asgi_llm_requests_total");
  const now = performance.now();
  const last = state.polls[state.polls.length - 1];
  const rate = last ? Math.max(0, total - last.total) / ((now - last.at) / 1000) : 0;
  state.polls = [...state.polls, { at: now, total, rate }].slice(-40);
  const since = state.polls.find((p) => now - p.at <= RATE_WINDOW_MS) || state.polls[0];
  const average = since.at < now ? Math.max(0, total - since.total) / ((now - since.at) / 1000) : 0;
  $("rate").textContent = last ? average.toFixed(2) : "–";
  $("in-flight").textContent = String(sum("asgi_llm_requests_in_flight"));
  $("total").textContent = String(total);
  const peak = Math.max(...state.polls.map((p) => p.rate), 0.001);
  $("spark").replaceChildren(
    ...state.polls.map((p) => {
      const bar = document.createElement("div");
      bar.style.height = Math.round((100 * p.rate) / peak) + "%";
      return bar;
    }),
  );
}

async function refreshOperator() {
  if (!state.routes) return;
  await showModels();
  const note = $("usage-note");
  if (!state.routes.metrics) {
    note.textContent = "Metrics are off on this server.";
    note.hidden = false;
    return;
  }
  const response = await call(state.routes.metrics);
  if (!response.ok) {
    note.textContent = response.status === 403 ? "Usage and rates need an operator key." : await errorText(response);
    note.hidden = false;
    return;
  }
  note.hidden = true;
  const samples = parseMetrics(await response.text());
  showUsage(samples);
  showRate(samples);
}

// --- wiring ---

function showView(id) {
  for (const tab of document.querySelectorAll(".tab")) tab.classList.toggle("active", tab.dataset.view === id);
  for (const view of document.querySelectorAll(".view")) view.hidden = view.id !== id;
  if (id === "operator-view") refreshOperator();
}

document.addEventListener("DOMContentLoaded", () => {
  $("key").value = state.key;
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    state.key = $("key").value.trim();
    if (state.key) sessionStorage.setItem(KEY, state.key);
    else sessionStorage.removeItem(KEY);
    start();
  });
  for (const tab of document.querySelectorAll(".tab")) tab.addEventListener("click", () => showView(tab.dataset.view));
  $("chat-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const text = $("prompt").value.trim();
    if (!text || !state.routes || state.abort) return;
    $("prompt").value = "";
    send(text);
  });
  $("prompt").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      $("chat-form").requestSubmit();
    }
  });
  $("stop").addEventListener("click", () => state.abort && state.abort.abort());
  $("clear").addEventListener("click", () => {
    state.history = [];
    $("log").replaceChildren();
  });
  setInterval(() => {
    if (!$("operator-view").hidden) refreshOperator();
  }, 2000);
  start();
});
