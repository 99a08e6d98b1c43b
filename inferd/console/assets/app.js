// The console's frame: which pages this process has (a server or a router),
// the tabs (the URL's #hash), and the key dialog the API asks for on a 401.

import { currentKey, forgetKey, onKeyNeeded } from "./api.js";
import { chatPage } from "./chat.js";
import { dashboardPage } from "./dashboard.js";
import { notify } from "./dom.js";
import { fleetPage } from "./fleet.js";
import { keysPage } from "./keys.js";
import { modelsPage } from "./models.js";
import { requestsPage } from "./requests.js";

const $ = (id) => document.getElementById(id);
const role = document.querySelector('meta[name="inferd-role"]').content;

const pages = {
  chat: chatPage,
  dashboard: dashboardPage(role),
  requests: requestsPage(role),
  keys: keysPage,
  ...(role === "server" ? { models: modelsPage } : { fleet: fleetPage() }),
};
let shown = null;

function askForKey(reason, refused) {
  const dialog = $("key-dialog");
  const input = $("key-dialog-input");
  $("key-dialog-reason").textContent = refused
    ? `That key was refused: ${reason}. Enter another.` : `This ${role} needs an API key: ${reason}.`;
  input.value = "";
  return new Promise((resolve) => {
    const form = $("key-dialog-form");
    const done = (event) => {
      event.preventDefault();
      if (!input.value.trim()) return;
      form.removeEventListener("submit", done);
      dialog.close();
      $("forget-key").hidden = false;
      resolve(input.value.trim());
    };
    form.addEventListener("submit", done);
    if (!dialog.open) dialog.showModal();
    input.focus();
  });
}

async function route() {
  const name = location.hash.slice(1) in pages ? location.hash.slice(1) : "chat";
  if (shown === name) return;
  if (shown) {
    pages[shown].hide();
    $(`page-${shown}`).hidden = true;
  }
  shown = name;
  for (const link of document.querySelectorAll("#tabs a")) {
    if (link.dataset.page === name) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  $(`page-${name}`).hidden = false;
  document.title = `${name[0].toUpperCase()}${name.slice(1)} · inferd console`;
  notify("");
  try {
    await pages[name].show();
  } catch (e) {
    notify(e.message);
  }
}

function start() {
  $("role-name").textContent = role;
  for (const item of document.querySelectorAll("[data-role]")) item.hidden = item.dataset.role !== role;
  onKeyNeeded(askForKey);
  $("key-dialog").addEventListener("cancel", (event) => event.preventDefault());  // nothing works without a key
  $("forget-key").hidden = currentKey() === null;
  $("forget-key").addEventListener("click", () => {
    forgetKey();
    location.reload();
  });
  for (const page of Object.values(pages)) page.mount();
  window.addEventListener("hashchange", () => {
    route();
    $("main").focus({ preventScroll: true });
  });
  if (matchMedia("(max-width: 760px)").matches) $("chat-settings").open = false;  // the conversation first
  document.body.dataset.ready = "true";
  route();
}

start();
