// The JSON API with the session: its cookie and the page's key (in a header on every request),
// one-line errors, SSE streams that reconnect and say when they did (the page then resyncs).

// The session's page key: the login hands it to this page alone (in the URL's fragment), and it
// lives in this origin's storage (scheme, host and port: no page on another port reads it). The
// cookie alone admits nobody: browsers send cookies to every port of a host.
export const KEY_HEADER = "X-Session-Key";
const KEY_STORE = "gpuyard.sessionKey";

export class ApiError extends Error {
  constructor(status, message, code, field) {
    super(message);
    this.status = status;
    this.code = code;
    this.field = field;
  }
  get missing() {
    return this.status === 404 || this.status === 405 || this.status === 501;
  }
}

function sessionKey() {
  try { return localStorage.getItem(KEY_STORE) || ""; } catch { return ""; }
}

/** The key a login put in this page's address (`#key=...`): kept, and taken out of the
 * address (and so of the history) at once. */
export function takeSessionKey() {
  const found = /^#key=([A-Za-z0-9_-]+)$/.exec(location.hash);
  if (!found) return;
  try { localStorage.setItem(KEY_STORE, found[1]); } catch { /* storage off: no session */ }
  history.replaceState(history.state, "", location.pathname + location.search);
}

export function forgetSessionKey() {
  try { localStorage.removeItem(KEY_STORE); } catch { /* nothing kept */ }
}

function withKey(headers) {
  const key = sessionKey();
  return key ? { ...headers, [KEY_HEADER]: key } : headers;
}

export function loginUrl() {
  const next = location.pathname + location.search;
  return `/ui/login?next=${encodeURIComponent(next)}`;
}

/** fetch() with the session (cookie and key); JSON in and out. Throws ApiError with the server's
 * one-line message. A 401 sends the browser to the login page. */
export async function api(path, { method = "GET", body, query, raw = false, headers = {} } = {}) {
  let url = path;
  if (query) {
    const params = new URLSearchParams();
    for (const [key, value] of Object.entries(query)) {
      if (value === null || value === undefined || value === "") continue;
      for (const v of Array.isArray(value) ? value : [value]) params.append(key, String(v));
    }
    const text = params.toString();
    if (text) url += (url.includes("?") ? "&" : "?") + text;
  }
  const init = { method, credentials: "same-origin", referrerPolicy: "same-origin", headers: withKey({ Accept: "application/json", ...headers }) };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(url, init);
  } catch (err) {
    throw new ApiError(0, "the server cannot be reached: is it running?", "unreachable");
  }
  if (response.status === 401 && !path.startsWith("/ui/")) {
    location.assign(loginUrl());
    throw new ApiError(401, "not logged in", "unauthorized");
  }
  if (!response.ok) throw await errorOf(response);
  if (raw) return response;
  if (response.status === 204) return null;
  return response.json();
}

async function errorOf(response) {
  let message = `${response.status} ${response.statusText}`.trim();
  let code = "";
  let field = null;
  try {
    const data = await response.json();
    const error = data && data.error;
    if (error && error.message) {
      message = error.message;
      code = error.code || "";
      field = error.field || null;
    } else if (data && data.detail) {
      // FastAPI's own validation errors (a body the route's model refuses).
      message = Array.isArray(data.detail)
        ? data.detail.map((d) => `${(d.loc || []).slice(1).join(".")}: ${d.msg}`).join("; ")
        : String(data.detail);
    }
  } catch {
    /* not JSON: keep the status line */
  }
  return new ApiError(response.status, message, code, field);
}

/** An SSE stream: `handlers` maps event names to callbacks (data parsed as JSON);
 * `onresync` runs when the stream reconnected (changes may have been missed) or said
 * `resync`; `onstate(live)` tells whether it is connected. Returns a close function.
 * Read with fetch(), not EventSource: an EventSource cannot send the session's key. */
export function stream(path, handlers, { onresync, onstate, onmissing } = {}) {
  let closed = false;
  let everOpen = false;
  let lost = false;
  let retry = 1000;
  let timer = null;
  let current = null; // the AbortController of the connection open now
  let lastId = ""; // the last event's `id:`, sent back as Last-Event-ID (as EventSource does)

  const dispatch = (name, lines) => {
    const text = lines.join("\n");
    if (name === "resync") { if (onresync) onresync(); return; }
    const handler = handlers[name];
    if (!handler) return;
    let data = null;
    try { data = JSON.parse(text); } catch { data = text; }
    handler(data, { type: name, data: text });
  };

  const read = async (body) => {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    let name = "";
    let lines = [];
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let end;
      while ((end = buffer.indexOf("\n")) >= 0) {
        let line = buffer.slice(0, end);
        buffer = buffer.slice(end + 1);
        if (line.endsWith("\r")) line = line.slice(0, -1);
        if (line === "") {
          if (lines.length) dispatch(name || "message", lines);
          name = "";
          lines = [];
          continue;
        }
        if (line.startsWith(":")) continue; // a comment (a keep-alive)
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let text = colon < 0 ? "" : line.slice(colon + 1);
        if (text.startsWith(" ")) text = text.slice(1);
        if (field === "event") name = text;
        else if (field === "data") lines.push(text);
        else if (field === "id" && !text.includes("\0")) lastId = text;
      }
    }
  };

  const again = (controller) => {
    if (closed || controller !== current) return; // closed, or let go while hidden
    current = null;
    if (onstate) onstate(false);
    lost = true;
    timer = setTimeout(open, retry);
    retry = Math.min(retry * 2, 15000);
  };

  const open = async () => {
    if (closed || current) return;
    const controller = new AbortController();
    current = controller;
    let response;
    const headers = withKey({ Accept: "text/event-stream" });
    if (lastId) headers["Last-Event-ID"] = lastId;
    try {
      response = await fetch(path, { method: "GET", credentials: "same-origin", cache: "no-store",
        headers, signal: controller.signal });
    } catch {
      again(controller); // unreachable (or aborted: then `again` does nothing)
      return;
    }
    if (!response.ok || !response.body) {
      if (response.body) response.body.cancel().catch(() => {});
      if (controller !== current) return;
      if (response.status === 401) { location.assign(loginUrl()); return; }
      if (response.status === 404 && !everOpen) { current = null; if (onmissing) onmissing(); return; }
      again(controller);
      return;
    }
    retry = 1000;
    if (onstate) onstate(true);
    if (lost && onresync) onresync();
    lost = false;
    everOpen = true;
    try { await read(response.body); } catch { /* dropped or aborted */ }
    again(controller);
  };

  const letGo = () => {
    clearTimeout(timer);
    const controller = current;
    current = null;
    if (controller) controller.abort();
  };

  // A tab in the background lets its stream go after a while and takes it again (resynced)
  // when shown: a browser opens at most 6 connections to a server over HTTP/1.1, and a few
  // forgotten tabs holding streams would leave none for the tab in front.
  const { stop } = whileHidden(() => {
    letGo();
    lost = true;
    if (onstate) onstate(false);
  }, () => { if (!closed) open(); });

  open();
  return () => {
    closed = true;
    stop();
    letGo();
  };
}

export const HIDDEN_GRACE_MS = 15000;

/** Calls `hide` once the page has been hidden for HIDDEN_GRACE_MS, then `show` when it is
 * visible again. Returns {stop} to remove the listener. */
export function whileHidden(hide, show) {
  let timer = null;
  let paused = false;
  const onChange = () => {
    if (document.hidden) {
      if (!timer && !paused) timer = setTimeout(() => { timer = null; paused = true; hide(); }, HIDDEN_GRACE_MS);
    } else {
      clearTimeout(timer);
      timer = null;
      if (paused) { paused = false; show(); }
    }
  };
  document.addEventListener("visibilitychange", onChange);
  return {
    pause: () => { paused = true; hide(); },
    stop: () => { clearTimeout(timer); document.removeEventListener("visibilitychange", onChange); },
  };
}

const TERMINAL = new Set(["COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"]);

/** domain/states.py's TERMINAL_STATES: the job will not run (again). */
export function isTerminal(state) {
  return TERMINAL.has(state);
}
