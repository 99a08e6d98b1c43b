// The router's fleet: each worker's state, in-flight requests, breaker and
// models (/v1/workers), and the routing policy's view of a worker's cache.

import { api } from "./api.js";
import { fillTable, h, keepFocus, notify, Poller } from "./dom.js";

const $ = (id) => document.getElementById(id);
const POLL_SECONDS = 1;

async function showCache(worker) {
  try {
    const view = await api(`v1/admin/cache-view/${encodeURIComponent(worker.id)}`);
    $("cache-view").textContent = `${worker.id}\n\n${JSON.stringify(view, null, 2)}`;
    $("cache-view").focus();
  } catch (e) {
    notify(e.message);
  }
}

async function refresh() {
  const fleet = await api("v1/workers");
  $("fleet-policy").textContent = `Policy: ${fleet.policy} · ${fleet.data.length} workers`;
  keepFocus($("fleet-table"), () => fillTable($("fleet-table"), [
    { title: "Worker", cell: (w) => w.id },
    { title: "URL", cell: (w) => w.url },
    { title: "State", cell: (w) => h("span", { class: `badge ${w.state}`, text: w.state }) },
    { title: "In flight", cell: (w) => `${w.in_flight}${w.parallel ? ` of ${w.parallel}` : ""}` },
    { title: "Breaker", cell: (w) => `${w.breaker.state}${w.breaker.failures ? ` (${w.breaker.failures} failures)` : ""}` },
    { title: "Models", cell: (w) => w.models.join(", ") || "–" },
    { title: "Source", cell: (w) => w.source },
    { title: "Cache", cell: (w) => h("button", {
      type: "button", class: "small", text: "Cache view", "aria-label": `Cache view of ${w.id}`,
      onclick: () => showCache(w),
    }) },
  ], fleet.data, "No workers have joined."));
}

export function fleetPage() {
  const poller = new Poller(refresh, POLL_SECONDS);
  return { mount() {}, show() { poller.start(); }, hide() { poller.stop(); } };
}
