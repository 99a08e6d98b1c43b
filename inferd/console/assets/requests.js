// Requests and jobs: the live request cards (/v1/requests) with cancel and
// interrupt, and the batches and jobs (/v1/jobs) with progress and results.

import { api, ApiError } from "./api.js";
import { actionButton as button, fillTable, h, keepFocus, ms, number, Poller, when } from "./dom.js";

const $ = (id) => document.getElementById(id);
const POLL_SECONDS = 1;
const ACTIVE = ["validating", "queued", "in_progress", "finalizing"];  // jobs that can still be cancelled

function card(r) {
  const live = r.state === "queued" || r.state === "running";
  const path = `v1/requests/${encodeURIComponent(r.id)}`;
  return h("li", { class: `card ${r.state}`, "data-id": r.id },
    h("div", { class: "card-head" }, h("strong", { text: r.model || "–" }), h("span", { class: "badge", text: r.state })),
    h("p", { class: "small muted", text: `${r.route} · ${r.id}${r.key ? ` · key ${r.key}` : ""}` }),
    h("p", { class: "small", text: [
      `${number(r.usage.prompt_tokens)} prompt + ${number(r.usage.completion_tokens)} generated tokens`,
      r.time_to_first_token === null ? null : `first token ${ms(r.time_to_first_token)}`,
      `${r.duration.toFixed(1)} s`,
    ].filter(Boolean).join(" · ") }),
    r.error ? h("p", { class: "small error", text: r.error }) : null,
    live ? h("div", { class: "actions" },
      button("Cancel", `Cancel request ${r.id}`, () => api(`${path}/cancel`, { method: "POST" })),
      button("Interrupt", `Interrupt request ${r.id} (keep its output so far)`,
        () => api(`${path}/interrupt`, { method: "POST" }))) : null);
}

async function refreshCards() {
  const { data } = await api("v1/requests");
  const list = $("request-cards");
  keepFocus(list, () => list.replaceChildren(
    ...(data.length ? data.map(card) : [h("li", { class: "muted", text: "No requests yet." })])));
}

function progress(job) {
  const c = job.request_counts;
  const done = c.total - c.pending;
  return h("span", { class: "progress" },
    h("progress", { max: Math.max(1, c.total), value: done, "aria-label": `${job.id}: ${done} of ${c.total} done` }),
    ` ${done}/${c.total}${c.errored ? `, ${c.errored} failed` : ""}`);
}

async function showResult(job) {
  const out = $("job-result");
  let text;
  if (job.kind === "batch") {
    const files = [job.result?.output_file_id, job.result?.error_file_id].filter(Boolean);
    const parts = await Promise.all(files.map(async (id) => {
      const r = await api(`v1/files/${encodeURIComponent(id)}/content`, { raw: true });
      return `# ${id}\n${await r.text()}`;
    }));
    text = parts.join("\n") || "No output file yet.";
  } else if (job.kind === "message_batch") {
    const r = await api(`v1/messages/batches/${encodeURIComponent(job.id)}/results`, { raw: true });
    text = await r.text();
  } else {
    text = JSON.stringify(await api(`v1/responses/${encodeURIComponent(job.id)}`), null, 2);
  }
  out.textContent = `${job.kind} ${job.id}\n\n${text}`;
  out.hidden = false;
  out.focus();
}

let lastJobs = "";

async function refreshJobs() {
  let listed;
  try {
    listed = await api("v1/jobs?limit=50");
  } catch (e) {
    if (e instanceof ApiError && (e.status === 404 || e.status === 501)) {
      fillTable($("jobs-table"), [{ title: "Jobs", cell: (r) => r }], [], e.message);
      return;
    }
    throw e;
  }
  const seen = JSON.stringify(listed.data);
  if (seen === lastJobs) return;  // unchanged: keep the rows (and the keyboard focus in them)
  lastJobs = seen;
  keepFocus($("jobs-table"), () => fillTable($("jobs-table"), [
    { title: "Job", cell: (j) => j.id },
    { title: "Kind", cell: (j) => j.kind.replace("_", " ") },
    { title: "State", cell: (j) => j.state },
    { title: "Progress", cell: (j) => progress(j) },
    { title: "Created", cell: (j) => when(j.created_at) },
    { title: "Actions", cell: (j) => h("div", { class: "actions" },
      ACTIVE.includes(j.state)
        ? button("Cancel", `Cancel job ${j.id}`, () => api(`v1/jobs/${encodeURIComponent(j.id)}/cancel`, { method: "POST" }))
        : null,
      button("Results", `Show the results of job ${j.id}`, () => showResult(j))) },
  ], listed.data, "No batches or jobs yet."));
}

export function requestsPage(role) {
  const poller = new Poller(async () => {
    await refreshCards();
    if (role === "server") await refreshJobs();
  }, POLL_SECONDS);
  return {
    mount() {
      if (role !== "server") {  // the router forwards batches to workers; their jobs are listed there
        $("jobs-title").hidden = true;
        $("jobs-table").hidden = true;
      }
    },
    show() { poller.start(); },
    hide() { poller.stop(); },
  };
}
