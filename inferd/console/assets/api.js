// Talking to the server the page came from: every call carries the key kept
// in session storage; a 401 asks for a key (once, however many calls wait) and retries.

const KEY = "inferd.key";
const root = new URL("../", location.href);  // the page is served at <root>ui/

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

let askKey = async () => { throw new ApiError(401, "an API key is needed"); };
let asking = null;

export function onKeyNeeded(ask) { askKey = ask; }
export function currentKey() { return sessionStorage.getItem(KEY); }
export function forgetKey() { sessionStorage.removeItem(KEY); }
export function url(path) { return new URL(path.replace(/^\//, ""), root); }

function needKey(reason, refused) {
  asking ??= askKey(reason, refused).then((key) => { sessionStorage.setItem(KEY, key); }).finally(() => { asking = null; });
  return asking;
}

// The message of an error in any dialect's envelope: {"error": {"message"}}, {"error": "..."}, {"detail"}.
export async function errorText(response) {
  try {
    const body = await response.clone().json();
    const error = body.error ?? body.detail;
    if (typeof error === "string") return error;
    if (error?.message) return error.message;
  } catch { /* not JSON */ }
  return `${response.status} ${response.statusText}`.trim();
}

// The response itself (`raw`), or its JSON; an answer that is not 2xx throws ApiError with the server's message.
export async function api(path, { method = "GET", json, signal, raw = false } = {}) {
  for (let tries = 0; ; tries++) {
    const headers = {};
    const key = currentKey();
    if (key) headers.Authorization = `Bearer ${key}`;
    if (json !== undefined) headers["Content-Type"] = "application/json";
    const response = await fetch(url(path), {
      method, headers, signal, body: json === undefined ? undefined : JSON.stringify(json),
    });
    if (response.status === 401 && tries < 5) {
      const reason = await errorText(response);
      if (currentKey() === key) {  // nobody has brought a new key meanwhile
        forgetKey();
        await needKey(reason, key !== null);
      }
      continue;
    }
    if (raw) {
      if (!response.ok) throw new ApiError(response.status, await errorText(response));
      return response;
    }
    if (!response.ok) throw new ApiError(response.status, await errorText(response));
    const text = await response.text();
    return text ? JSON.parse(text) : null;
  }
}

// Lines of a streamed body as they arrive (NDJSON, or SSE's "data:" lines).
export async function* lines(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffered = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffered += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffered.indexOf("\n")) >= 0) {
      const line = buffered.slice(0, end).replace(/\r$/, "");
      buffered = buffered.slice(end + 1);
      if (line) yield line;
    }
  }
  if (buffered.trim()) yield buffered;
}
