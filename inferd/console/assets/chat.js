// The chat playground: a conversation kept in this browser, streamed answers
// rendered as Markdown, the sampling options, a JSON schema for structured
// output, and under each answer its token count, speed and time to first token.

import { api, ApiError, lines } from "./api.js";
import { h } from "./dom.js";
import { renderMarkdown } from "./markdown.js";

const STORE = "inferd.chat";
const $ = (id) => document.getElementById(id);

let conversation = [];
let running = null;  // the AbortController of the answer being streamed

export const chatPage = {
  mount() {
    const saved = JSON.parse(localStorage.getItem(STORE) || "{}");
    conversation = Array.isArray(saved.messages) ? saved.messages : [];
    for (const [name, value] of Object.entries(saved.options || {})) {
      const field = $("chat-options").elements[name];
      if (field && name !== "model") field.value = value;
    }
    this.wantedModel = saved.options?.model;
    $("chat-form").addEventListener("submit", (e) => { e.preventDefault(); send(); });
    $("chat-options").addEventListener("submit", (e) => e.preventDefault());
    $("chat-options").addEventListener("change", save);
    $("chat-input").addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        $("chat-form").requestSubmit();
      }
    });
    document.addEventListener("keydown", (e) => { if (e.key === "Escape" && running) running.abort(); });
    $("chat-stop").addEventListener("click", () => running?.abort());
    $("chat-clear").addEventListener("click", () => {
      running?.abort();
      conversation = [];
      save();
      renderLog();
      $("chat-input").focus();
    });
    renderLog();
  },

  async show() {
    await loadModels(this.wantedModel);
  },

  hide() {},
};

async function loadModels(wanted) {
  const select = $("chat-model");
  const current = select.value || wanted;
  const { data } = await api("v1/models");
  const chat = data.filter((m) => !m.capabilities || m.capabilities.includes("chat") || m.capabilities.includes("completion"));
  select.replaceChildren(...chat.map((m) => h("option", {
    value: m.id, text: m.loaded === false ? `${m.id} (stored, loads on first use)` : m.id,
  })));
  if (chat.some((m) => m.id === current)) select.value = current;
}

function save() {
  const options = Object.fromEntries(new FormData($("chat-options")).entries());
  localStorage.setItem(STORE, JSON.stringify({ messages: conversation, options }));
}

function readOptions() {
  const form = $("chat-options").elements;
  const body = { model: form.model.value };
  for (const [field, name] of [["temperature", "temperature"], ["top_p", "top_p"], ["max_tokens", "max_tokens"]]) {
    const value = form[name].value.trim();
    if (value !== "") body[field] = Number(value);
  }
  const stop = form.stop.value.split("\n").filter((line) => line !== "");
  if (stop.length) body.stop = stop;
  const schemaText = form.schema.value.trim();
  if (schemaText) {
    let schema;
    try {
      schema = JSON.parse(schemaText);
    } catch (e) {
      throw new Error(`the JSON schema is not valid JSON: ${e.message}`);
    }
    body.response_format = { type: "json_schema", json_schema: { name: "answer", schema, strict: true } };
  }
  return { body, system: form.system.value.trim() };
}

async function send() {
  if (running) return;
  const input = $("chat-input");
  const text = input.value.trim();
  if (!text) return;
  const problem = $("chat-options-error");
  let options;
  try {
    options = readOptions();
    problem.hidden = true;
  } catch (e) {
    problem.textContent = e.message;
    problem.hidden = false;
    $("chat-settings").open = true;
    return;
  }
  input.value = "";
  conversation.push({ role: "user", content: text });
  const answer = { role: "assistant", content: "", reasoning: "", model: options.body.model };
  conversation.push(answer);
  const history = conversation.slice(0, -1).map(({ role, content }) => ({ role, content }));
  const messages = options.system ? [{ role: "system", content: options.system }, ...history] : history;
  renderLog();
  const body = $("chat-log").lastElementChild.querySelector(".body");
  running = new AbortController();
  setBusy(true);
  const started = performance.now();
  let first = null;
  let chunks = 0;
  let usage = null;
  let frame = 0;
  const paint = () => {
    frame = 0;
    body.replaceChildren(renderMarkdown(answer.content));
  };
  try {
    const response = await api("v1/chat/completions", {
      method: "POST", raw: true, signal: running.signal,
      json: { ...options.body, messages, stream: true, stream_options: { include_usage: true } },
    });
    for await (const line of lines(response)) {
      if (!line.startsWith("data:")) continue;
      const data = line.slice(5).trim();
      if (data === "[DONE]") break;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new ApiError(500, chunk.error.message || String(chunk.error));
      const choice = chunk.choices?.[0];
      const piece = choice?.delta?.content || "";
      answer.reasoning += choice?.delta?.reasoning_content || "";
      if (piece) {
        first ??= performance.now();
        chunks++;
        answer.content += piece;
        frame ||= requestAnimationFrame(paint);
      }
      if (choice?.finish_reason) answer.finish = choice.finish_reason;
      if (chunk.usage) usage = chunk.usage;
    }
  } catch (e) {
    if (e.name === "AbortError") answer.finish = "stopped";
    else answer.error = e.message;
  } finally {
    cancelAnimationFrame(frame);
    const ended = performance.now();
    const tokens = usage?.completion_tokens ?? chunks;
    answer.stats = {
      tokens, exact: Boolean(usage), prompt: usage?.prompt_tokens ?? null,
      ttft: first === null ? null : (first - started) / 1000,
      speed: first !== null && tokens > 1 && ended > first ? (tokens - 1) / ((ended - first) / 1000) : null,
    };
    running = null;
    setBusy(false);
    save();
    renderLog();
    input.focus();
  }
}

function setBusy(busy) {
  $("chat-send").disabled = busy;
  $("chat-stop").disabled = !busy;
  $("chat-log").setAttribute("aria-busy", String(busy));
}

function renderLog() {
  const log = $("chat-log");
  log.replaceChildren(...conversation.map(renderMessage));
  log.lastElementChild?.scrollIntoView({ block: "end" });
}

function renderMessage(message) {
  const assistant = message.role === "assistant";
  const body = h("div", { class: "body" });
  if (assistant) body.append(renderMarkdown(message.content));
  else body.textContent = message.content;
  return h("li", { class: `message ${message.role}` },
    h("span", { class: "who", text: assistant ? (message.model || "assistant") : "you" }),
    message.reasoning ? h("details", { class: "reasoning" }, h("summary", { text: "Reasoning" }),
      h("p", { text: message.reasoning })) : null,
    body,
    message.error ? h("p", { class: "error", role: "alert", text: message.error }) : null,
    message.stats && (message.stats.tokens || !message.error) ? h("p", { class: "stats muted small", text: statsLine(message) }) : null);
}

function statsLine({ stats, finish }) {
  const parts = [`${stats.exact ? "" : "~"}${stats.tokens} tokens`];
  if (stats.speed !== null) parts.push(`${stats.speed.toFixed(1)} tokens/s`);
  if (stats.ttft !== null) parts.push(`first token ${(stats.ttft * 1000).toFixed(0)} ms`);
  if (stats.prompt !== null) parts.push(`${stats.prompt} prompt tokens`);
  if (finish === "stopped") parts.push("stopped");
  else if (finish === "length") parts.push("cut at max tokens");
  return parts.join(" · ");
}

