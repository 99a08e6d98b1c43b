// Keys (an admin key's page): create (the secret shown once, with a copy
// button), scopes and limits, rotate, disable or enable, delete, today's usage.

import { api, ApiError } from "./api.js";
import { actionButton, confirmed, fillTable, h, notify, number, when } from "./dom.js";

const $ = (id) => document.getElementById(id);
const WAIT = "wait";  // an action that asks once more before it acts
const LIMITS = [["rpm", "key-rpm"], ["tpm", "key-tpm"], ["daily_tokens", "key-daily"], ["max_concurrent", "key-concurrent"]];

async function refresh() {
  let listed;
  try {
    listed = await api("api/keys");
  } catch (e) {
    if (!(e instanceof ApiError) || e.status !== 403) throw e;
    $("key-form").hidden = true;
    fillTable($("keys-table"), [{ title: "Keys", cell: (r) => r }], [], e.message);
    return;
  }
  $("key-form").hidden = false;
  fillTable($("keys-table"), [
    { title: "Name", cell: (k) => `${k.name}${k.admin ? " (admin)" : ""}` },
    { title: "Prefix", cell: (k) => k.prefix },
    { title: "Models", cell: (k) => (k.scopes.length ? k.scopes.join(", ") : "all") },
    { title: "Limits", cell: (k) => limits(k.limits) },
    { title: "Today", cell: (k) => usage(k.usage_today) },
    { title: "Last used", cell: (k) => when(k.last_used_at) },
    { title: "State", cell: (k) => (k.disabled ? "disabled" : "active") },
    { title: "Actions", cell: (k) => actions(k) },
  ], listed.data, "No keys.");
}

function limits(l) {
  const set = Object.entries(l).filter(([, v]) => v);
  return set.length ? set.map(([k, v]) => `${k.replace("_", " ")} ${number(v)}`).join(", ") : "none";
}

function usage(u) {
  return `${number(u.requests)} requests, ${number(u.prompt_tokens + u.completion_tokens)} tokens`;
}

function showSecret(name, secret) {
  $("key-secret-name").textContent = name;
  $("key-secret-value").textContent = secret;
  $("key-secret").hidden = false;
  $("key-copy").focus();
}

// An action on a key, and the listing again after it (unless it waits for more from the user).
function button(text, label, action) {
  return actionButton(text, label, async (el) => {
    if (await action(el) !== WAIT) await refresh();
  });
}

let editing = null;  // the name of the key the form edits; null: the form creates one

function edit(k) {
  editing = k.name;
  $("key-name").value = k.name;
  $("key-name").readOnly = true;
  $("key-scopes").value = k.scopes.join(", ");
  $("key-admin").checked = k.admin;
  for (const [field, id] of LIMITS) $(id).value = k.limits[field] || "";
  $("key-create").textContent = `Save ${k.name}`;
  $("key-edit-cancel").hidden = false;
  $("key-scopes").focus();
}

function stopEditing() {
  editing = null;
  $("key-form").reset();
  $("key-name").readOnly = false;
  $("key-create").textContent = "Create key";
  $("key-edit-cancel").hidden = true;
}

function actions(k) {
  const path = `api/keys/${encodeURIComponent(k.name)}`;
  return h("div", { class: "actions" },
    button("Edit", `Edit the models and limits of ${k.name}`, async () => { edit(k); return WAIT; }),
    button("Rotate", `Rotate ${k.name}`, async () => {
      const rotated = await api(`${path}/rotate`, { method: "POST" });
      showSecret(rotated.name, rotated.secret);
    }),
    button(k.disabled ? "Enable" : "Disable", `${k.disabled ? "Enable" : "Disable"} ${k.name}`, async () => {
      await api(path, { method: "PATCH", json: { disabled: !k.disabled } });
    }),
    button("Delete", `Delete ${k.name}`, async (el) => {
      if (!confirmed(el)) return WAIT;
      await api(path, { method: "DELETE" });
      notify(`Key ${k.name} is deleted.`, "info");
    }));
}

async function submit(event) {
  event.preventDefault();
  const body = { admin: $("key-admin").checked };
  const scopes = $("key-scopes").value.split(",").map((s) => s.trim()).filter(Boolean);
  const limits = {};
  for (const [field, id] of LIMITS) {
    if ($(id).value !== "") limits[field] = Number($(id).value);
    else if (editing) limits[field] = 0;  // emptied: no limit
  }
  try {
    if (editing) {
      await api(`api/keys/${encodeURIComponent(editing)}`, { method: "PATCH", json: { ...body, scopes, limits } });
      notify(`Key ${editing} is saved.`, "info");
      stopEditing();
    } else {
      const created = await api("api/keys", {
        method: "POST",
        json: { name: $("key-name").value.trim(), ...body, ...(scopes.length ? { scopes } : {}),
          ...(Object.keys(limits).length ? { limits } : {}) },
      });
      $("key-form").reset();
      showSecret(created.name, created.secret);
      notify("");
    }
  } catch (e) {
    notify(e.message);
  }
  await refresh();
}

export const keysPage = {
  mount() {
    $("key-form").addEventListener("submit", submit);
    $("key-edit-cancel").addEventListener("click", stopEditing);
    $("key-copy").addEventListener("click", async () => {
      try {
        await navigator.clipboard.writeText($("key-secret-value").textContent);
        $("key-copy").textContent = "Copied";
      } catch {
        notify("The browser refused the clipboard; select the secret and copy it by hand.");
      }
    });
    $("key-secret-done").addEventListener("click", () => {
      $("key-secret").hidden = true;
      $("key-secret-value").textContent = "";  // shown once: gone from the page once dismissed
      $("key-copy").textContent = "Copy";
    });
  },
  show: refresh,
  hide() {
    $("key-secret").hidden = true;
    $("key-secret-value").textContent = "";
  },
};
