// Models: the store and what is loaded (/api/tags, /api/ps), pull with progress
// (/api/pull's NDJSON), load and unload (Ollama's /api/generate with nothing to
// generate, keep_alive 0 to unload) and delete (/api/delete).

import { api, lines } from "./api.js";
import { actionButton as button, bytes, confirmed, fillTable, h, keepFocus, notify, Poller } from "./dom.js";

const $ = (id) => document.getElementById(id);
const short = (name) => name.replace(/:latest$/, "");
const POLL_SECONDS = 2;
const FOREVER = "9999-12-31T23:59:59Z";  // how /api/ps shows the server's own model

let shown = "";

async function refresh() {
  const [tags, ps] = await Promise.all([api("api/tags"), api("api/ps")]);
  const loaded = new Map(ps.models.map((m) => [short(m.name), m]));
  const rows = tags.models.map((m) => ({ ...m, running: loaded.get(short(m.name)) }));
  for (const [name, m] of loaded) {  // loaded under a name the store lists otherwise
    if (!rows.some((r) => short(r.name) === name)) rows.push({ ...m, running: m });
  }
  const seen = JSON.stringify(rows);
  if (seen === shown) return;  // unchanged: keep the rows (and the keyboard focus in them)
  shown = seen;
  keepFocus($("models-table"), () => fillTable($("models-table"), [
    { title: "Model", cell: (m) => m.name },
    { title: "Size", cell: (m) => bytes(m.size) },
    { title: "Quantization", cell: (m) => m.details?.quantization_level || "–" },
    { title: "Format", cell: (m) => [m.details?.format, m.details?.family].filter(Boolean).join(" · ") || "–" },
    { title: "State", cell: (m) => state(m) },
    { title: "Actions", cell: (m) => actions(m) },
  ], rows, "No models: pull one above."));
}

function state(m) {
  if (!m.running) return "stored";
  if (m.running.expires_at === FOREVER) return "loaded (the server's own)";
  return `loaded until ${new Date(m.running.expires_at).toLocaleTimeString("en-GB")}`;
}

function actions(m) {
  const name = m.name;
  const own = m.running?.expires_at === FOREVER;
  const cell = h("div", { class: "actions" });
  if (!m.running) {
    cell.append(button("Load", `Load ${name}`, async () => {
      await api("api/generate", { method: "POST", json: { model: name, stream: false } });
      notify(`${name} is loaded.`, "info");
      await refresh();
    }));
  } else if (!own) {
    cell.append(button("Unload", `Unload ${name}`, async () => {
      await api("api/generate", { method: "POST", json: { model: name, keep_alive: 0, stream: false } });
      notify(`${name} unloads as soon as its requests end.`, "info");
      await refresh();
    }));
  }
  if (m.digest && !own) {  // stored: it can be deleted (asks once more first)
    cell.append(button("Delete", `Delete ${name}`, async (el) => {
      if (!confirmed(el)) return;
      await api("api/delete", { method: "DELETE", json: { model: name } });
      notify(`${name} is deleted from the store.`, "info");
      await refresh();
    }));
  }
  return cell;
}

async function pull(event) {
  event.preventDefault();
  const name = $("pull-name").value.trim();
  const progress = $("pull-progress");
  const log = $("pull-log");
  const start = $("pull-start");
  $("pull-status").hidden = false;
  $("pull-label").textContent = `Pulling ${name}`;
  progress.max = 1;
  progress.value = 0;
  log.replaceChildren();
  start.disabled = true;
  const step = (text) => {
    if (log.lastElementChild?.textContent !== text) log.append(h("li", { text }));
  };
  try {
    const response = await api("api/pull", { method: "POST", json: { model: name, stream: true }, raw: true });
    for await (const line of lines(response)) {
      const event = JSON.parse(line);
      if (event.error) throw new Error(event.error);
      step(event.status);
      if (event.total) {
        progress.max = event.total;
        progress.value = event.completed ?? 0;
        $("pull-label").textContent = `${event.status}: ${bytes(event.completed ?? 0)} of ${bytes(event.total)}`;
      }
      if (event.status === "success") {
        progress.value = progress.max;
        $("pull-label").textContent = `Pulled ${name}`;
      }
    }
    await refresh();
  } catch (e) {
    $("pull-label").textContent = `Pull failed: ${e.message}`;
    step(`error: ${e.message}`);
  } finally {
    start.disabled = false;
  }
}

// Polled while shown: loads, unloads and keep-alive expiries change the states.
const poller = new Poller(refresh, POLL_SECONDS);

export const modelsPage = {
  mount() { $("pull-form").addEventListener("submit", pull); },
  show() { poller.start(); },
  hide() { poller.stop(); },
};
