// Markdown to DOM, for answers: fenced code blocks (with a copy button), headings,
// lists, quotes, paragraphs; inline code, bold, italic and http(s) links. Text is
// only ever set as text, so nothing in an answer can run or style the page.

import { h } from "./dom.js";

export function renderMarkdown(source) {
  const out = document.createDocumentFragment();
  const lines = source.replace(/\r\n/g, "\n").split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(/^\s*(```|~~~)\s*([\w+#.-]*)/);
    if (fence) {
      const body = [];
      i++;
      while (i < lines.length && !lines[i].trim().startsWith(fence[1])) body.push(lines[i++]);
      i++;  // the closing fence (or the end of an answer still streaming)
      out.append(codeBlock(body.join("\n"), fence[2]));
      continue;
    }
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    if (heading) {
      out.append(h(`h${Math.min(6, heading[1].length + 2)}`, {}, inline(heading[2])));
      i++;
      continue;
    }
    if (/^\s*([-*+]|\d+[.)])\s+/.test(line)) {
      const ordered = /^\s*\d/.test(line);
      const list = h(ordered ? "ol" : "ul");
      while (i < lines.length && /^\s*([-*+]|\d+[.)])\s+/.test(lines[i])) {
        list.append(h("li", {}, inline(lines[i].replace(/^\s*([-*+]|\d+[.)])\s+/, ""))));
        i++;
      }
      out.append(list);
      continue;
    }
    if (line.startsWith(">")) {
      const quoted = [];
      while (i < lines.length && lines[i].startsWith(">")) quoted.push(lines[i++].replace(/^>\s?/, ""));
      out.append(h("blockquote", {}, renderMarkdown(quoted.join("\n"))));
      continue;
    }
    if (!line.trim()) {
      i++;
      continue;
    }
    const paragraph = [];
    while (i < lines.length && lines[i].trim() && !/^(\s*(```|~~~)|#{1,6}\s|>|\s*([-*+]|\d+[.)])\s)/.test(lines[i])) {
      paragraph.push(lines[i++]);
    }
    if (!paragraph.length) paragraph.push(lines[i++]);
    const p = h("p");
    paragraph.forEach((text, n) => {
      if (n) p.append(h("br"));
      p.append(inline(text));
    });
    out.append(p);
  }
  return out;
}

function codeBlock(code, language) {
  const copy = h("button", { type: "button", class: "copy quiet", text: "Copy code" });
  copy.addEventListener("click", async () => {
    await navigator.clipboard?.writeText(code).catch(() => {});
    copy.textContent = "Copied";
    setTimeout(() => { copy.textContent = "Copy code"; }, 1500);
  });
  return h("figure", { class: "code" },
    h("figcaption", {}, h("span", { text: language || "code" }), copy),
    h("pre", { tabindex: "0" }, h("code", { text: code })));
}

const INLINE = /(`+)([\s\S]*?)\1|\*\*([^*]+)\*\*|__([^_]+)__|\*([^*\s][^*]*)\*|_([^_\s][^_]*)_|\[([^\]]+)\]\((https?:\/\/[^\s)]+)\)/g;

function inline(text) {
  const out = document.createDocumentFragment();
  let last = 0;
  for (const m of text.matchAll(INLINE)) {
    out.append(text.slice(last, m.index));
    if (m[1]) out.append(h("code", { text: m[2] }));
    else if (m[3] || m[4]) out.append(h("strong", {}, inline(m[3] || m[4])));
    else if (m[5] || m[6]) out.append(h("em", {}, inline(m[5] || m[6])));
    else out.append(h("a", { href: m[8], rel: "noopener noreferrer", target: "_blank", text: m[7] }));
    last = m.index + m[0].length;
  }
  out.append(text.slice(last));
  return out;
}
