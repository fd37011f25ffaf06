// The JSON API with the session cookie: CSRF header on unsafe methods, one-line errors,
// SSE streams that reconnect and say when they did (the page then resyncs).

export const CSRF_COOKIE = "gpuyard_csrf";
export const CSRF_HEADER = "X-CSRF-Token";

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

function cookie(name) {
  for (const part of document.cookie.split(";")) {
    const [key, ...value] = part.trim().split("=");
    if (key === name) return decodeURIComponent(value.join("="));
  }
  return "";
}

export function loginUrl() {
  const next = location.pathname + location.search;
  return `/ui/login?next=${encodeURIComponent(next)}`;
}

/** fetch() with the cookie and CSRF; JSON in and out. Throws ApiError with the server's
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
  const init = { method, credentials: "same-origin", referrerPolicy: "same-origin", headers: { Accept: "application/json", ...headers } };
  if (method !== "GET" && method !== "HEAD") init.headers[CSRF_HEADER] = cookie(CSRF_COOKIE);
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
 * `resync`; `onstate(live)` tells whether it is connected. Returns a close function. */
export function stream(path, handlers, { onresync, onstate, onmissing } = {}) {
  let source = null;
  let closed = false;
  let everOpen = false;
  let lost = false;
  let retry = 1000;
  let timer = null;

  const open = () => {
    if (closed) return;
    source = new EventSource(path);
    source.onopen = () => {
      retry = 1000;
      if (onstate) onstate(true);
      if (lost && onresync) onresync();
      lost = false;
      everOpen = true;
    };
    source.onerror = () => {
      if (onstate) onstate(false);
      lost = true;
      // EventSource gives up on a non-200 answer (readyState CLOSED): find out why.
      if (source.readyState === EventSource.CLOSED) {
        source.close();
        probe();
      }
    };
    for (const [name, handler] of Object.entries(handlers)) {
      source.addEventListener(name, (event) => {
        let data = null;
        try { data = JSON.parse(event.data); } catch { data = event.data; }
        handler(data, event);
      });
    }
    source.addEventListener("resync", () => onresync && onresync());
  };

  const probe = async () => {
    if (closed) return;
    try {
      const response = await fetch(path, { method: "GET", credentials: "same-origin",
        headers: { Accept: "text/event-stream" }, signal: AbortSignal.timeout(3000) });
      if (response.body) response.body.cancel().catch(() => {});
      if (response.status === 401) { location.assign(loginUrl()); return; }
      if (response.status === 404 && !everOpen) { if (onmissing) onmissing(); return; }
    } catch { /* unreachable or timed out: retry below */ }
    timer = setTimeout(open, retry);
    retry = Math.min(retry * 2, 15000);
  };

  // A tab in the background lets its stream go after a while and takes it again (resynced)
  // when shown: a browser opens at most 6 connections to a server over HTTP/1.1, and a few
  // forgotten tabs holding streams would leave none for the tab in front.
  const { stop } = whileHidden(() => {
    clearTimeout(timer);
    if (source) source.close();
    source = null;
    lost = true;
    if (onstate) onstate(false);
  }, () => { if (!closed) open(); });

  open();
  return () => {
    closed = true;
    stop();
    clearTimeout(timer);
    if (source) source.close();
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
