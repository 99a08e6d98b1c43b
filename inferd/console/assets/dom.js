// Building the page from data: elements with text only (never HTML from the server), tables, numbers.

export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (name === "class") el.className = value;
    else if (name === "text") el.textContent = value;
    else if (name in el && typeof value !== "string") el[name] = value;
    else el.setAttribute(name, value === true ? "" : value);
  }
  el.append(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  return el;
}

// columns: [{title, cell: (row) => Node | string}]; an empty list shows `empty`.
export function fillTable(table, columns, rows, empty = "Nothing yet.") {
  const head = h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col", text: c.title }))));
  const body = h("tbody");
  if (!rows.length) body.append(h("tr", {}, h("td", { colSpan: columns.length, class: "muted", text: empty })));
  for (const row of rows) {
    body.append(h("tr", {}, columns.map((c) => {
      const value = c.cell(row);
      return h("td", { "data-label": c.title }, value instanceof Node ? value : String(value ?? ""));
    })));
  }
  table.replaceChildren(head, body);
}

export function bytes(n) {
  if (!n) return "0 B";
  const units = ["B", "KB", "MB", "GB", "TB"];
  const i = Math.min(units.length - 1, Math.floor(Math.log(n) / Math.log(1000)));
  return `${(n / 1000 ** i).toFixed(i ? 1 : 0)} ${units[i]}`;
}

export function number(n, digits = 0) {
  if (n === null || n === undefined || Number.isNaN(n)) return "–";
  return Number(n).toLocaleString("en", { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

export function percent(ratio) {
  return ratio === null || ratio === undefined ? "–" : `${(ratio * 100).toFixed(1)}%`;
}

export function ms(seconds) {
  return seconds === null || seconds === undefined ? "–" : `${(seconds * 1000).toFixed(seconds < 0.1 ? 1 : 0)} ms`;
}

export function when(unixSeconds) {
  if (!unixSeconds) return "–";
  return new Date(unixSeconds * 1000).toLocaleString("en-GB", { dateStyle: "short", timeStyle: "medium" });
}

// One polite message at the top of the page, for what went wrong (or right) outside a form.
export function notify(message, kind = "error") {
  const notice = document.getElementById("notice");
  notice.textContent = message;
  notice.dataset.kind = kind;
  notice.hidden = !message;
}

// A small button that runs `action(button)`, disabled while it runs; an error goes to `notify`.
export function actionButton(text, label, action) {
  const el = h("button", { type: "button", class: "small", text, "aria-label": label });
  el.addEventListener("click", async () => {
    el.disabled = true;
    try {
      await action(el);
    } catch (e) {
      notify(e.message);
    } finally {
      el.disabled = false;
    }
  });
  return el;
}

// A destructive button asks once more: the first press relabels it, a second within 5 s acts.
export function confirmed(el) {
  if (el.dataset.confirm === "yes") return true;
  const text = el.textContent;
  el.dataset.confirm = "yes";
  el.textContent = "Really delete?";
  setTimeout(() => {
    el.dataset.confirm = "";
    el.textContent = text;
  }, 5000);
  return false;
}

// Runs `task` now and every `seconds` while started; errors go to `notify`.
export class Poller {
  constructor(task, seconds) {
    this.task = task;
    this.seconds = seconds;
    this.timer = null;
  }

  start() {
    if (this.timer) return;
    const tick = async () => {
      try { await this.task(); } catch (e) { notify(e.message); }
      if (this.timer) this.timer = setTimeout(tick, this.seconds * 1000);
    };
    this.timer = setTimeout(tick, 0);
  }

  stop() {
    clearTimeout(this.timer);
    this.timer = null;
  }
}

// Rebuilds `container` with `rebuild` and gives the keyboard focus back to the
// control of the same name, so a table refreshed every second stays usable by keyboard.
export function keepFocus(container, rebuild) {
  const focused = container.contains(document.activeElement) ? document.activeElement : null;
  const name = focused?.getAttribute("aria-label") || focused?.textContent;
  rebuild();
  if (!name) return;
  const again = [...container.querySelectorAll("button, a, [tabindex]")]
    .find((el) => (el.getAttribute("aria-label") || el.textContent) === name);
  again?.focus();
}
