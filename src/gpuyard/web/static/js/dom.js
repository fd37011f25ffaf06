// Small DOM and formatting helpers shared by the pages (no framework).

/** h("div.cls#id", {attrs}, children...): build an element; strings become text nodes. */
export function h(tag, attrs, ...children) {
  const [name, ...rest] = tag.split(/(?=[.#])/);
  const el = document.createElement(name || "div");
  for (const part of rest) {
    if (part[0] === ".") el.classList.add(part.slice(1));
    else el.id = part.slice(1);
  }
  if (attrs && (typeof attrs !== "object" || attrs instanceof Node || Array.isArray(attrs))) {
    children.unshift(attrs);
    attrs = null;
  }
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else if (key === "text") el.textContent = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else el.setAttribute(key, value === true ? "" : value);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : String(child));
  }
}

export function clear(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** Slurm's [D-]HH:MM:SS (M:SS under an hour), as the CLI prints durations. */
export function duration(seconds) {
  if (seconds === null || seconds === undefined || Number.isNaN(seconds)) return "-";
  let total = Math.max(0, Math.floor(seconds));
  const days = Math.floor(total / 86400);
  total -= days * 86400;
  const hours = Math.floor(total / 3600);
  total -= hours * 3600;
  const minutes = Math.floor(total / 60);
  const secs = total - minutes * 60;
  const p = (n) => String(n).padStart(2, "0");
  if (days) return `${days}-${p(hours)}:${p(minutes)}:${p(secs)}`;
  if (hours) return `${hours}:${p(minutes)}:${p(secs)}`;
  return `${minutes}:${p(secs)}`;
}

/** "in 5m", "3h ago": a short relative time for an ISO string or epoch seconds. */
export function relative(when) {
  const t = typeof when === "number" ? when * 1000 : Date.parse(when);
  if (!Number.isFinite(t)) return "-";
  const diff = (t - Date.now()) / 1000;
  const abs = Math.abs(diff);
  let text;
  if (abs < 45) text = `${Math.round(abs)}s`;
  else if (abs < 3600) text = `${Math.round(abs / 60)}m`;
  else if (abs < 86400 * 2) text = `${(abs / 3600).toFixed(abs < 36000 ? 1 : 0)}h`;
  else text = `${Math.round(abs / 86400)}d`;
  if (abs < 1) return "now";
  return diff > 0 ? `in ${text}` : `${text} ago`;
}

const p2 = (n) => String(n).padStart(2, "0");

/** A local date and time for an ISO string or epoch seconds, 24-hour and ISO-like as the CLI
 * prints times ("2026-12-02 14:05:09"); "-" for none. */
export function localTime(when) {
  if (when === null || when === undefined || when === "") return "-";
  const t = typeof when === "number" ? when * 1000 : Date.parse(when);
  if (!Number.isFinite(t)) return "-";
  const d = new Date(t);
  return `${d.getFullYear()}-${p2(d.getMonth() + 1)}-${p2(d.getDate())} ${clockTime(t / 1000)}`;
}

/** The local time of day of epoch seconds, 24-hour: "14:05:09" (`seconds` false: "14:05"). */
export function clockTime(epochS, seconds = true) {
  const d = new Date(epochS * 1000);
  return `${p2(d.getHours())}:${p2(d.getMinutes())}${seconds ? `:${p2(d.getSeconds())}` : ""}`;
}

/** What a terminal shows of a program's output: each `\r` returns to the line's start and
 * what follows overwrites it (a tqdm bar's frames), so a line shows its last frame over what
 * is left of the earlier ones; `\r\n` is a plain line end. */
export function terminalText(text) {
  if (!text.includes("\r")) return text;
  return text.split("\n").map((line) => {
    if (!line.includes("\r")) return line;
    const frames = line.split("\r");
    if (frames.length > 1 && frames[frames.length - 1] === "") frames.pop();
    let shown = "";
    for (const frame of frames) shown = frame + shown.slice(frame.length);
    return shown;
  }).join("\n");
}

/** MiB as the CLI prints sizes: 16G, 1.5G, 512M. */
export function sizeMib(mib) {
  if (!mib) return "-";
  if (mib >= 1024 && mib % 1024 === 0) return `${mib / 1024}G`;
  if (mib >= 1024) return `${(mib / 1024).toFixed(1)}G`;
  return `${Math.round(mib)}M`;
}

/** A --gpu-mem that holds a run that peaked at `peakMib`: a quarter more, whole GiB
 * (services/gpu_mem.py suggested_mib: the same rule as `gpuyard submit`'s advice). */
export function suggestedGpuMemMib(peakMib) {
  return Math.ceil((peakMib * 1.25) / 1024) * 1024;
}

export function num(value, unit = "", digits = 0) {
  return value === null || value === undefined ? "n/a" : `${Number(value).toFixed(digits)}${unit}`;
}

/** Announce a short message to screen readers (the shell's polite live region). */
export function announce(message) {
  const region = document.getElementById("announcer");
  if (!region) return;
  region.textContent = "";
  setTimeout(() => { region.textContent = message; }, 30);
}

/** A notice shown at the top of the page (errors in one line). */
export function notice(message, kind = "error") {
  const box = document.getElementById("notice");
  if (!box) return;
  clear(box, message ? h(`div.notice.${kind}`, { role: kind === "error" ? "alert" : "status" },
    h("span", message),
    h("button.link", { type: "button", "aria-label": "Dismiss", onclick: () => clear(box) }, "×"),
  ) : null);
}

export function unavailable(what, detail) {
  return h("div.unavailable", { role: "status" },
    h("strong", `${what}: not available on this server.`),
    detail ? h("span", ` ${detail}`) : null);
}
