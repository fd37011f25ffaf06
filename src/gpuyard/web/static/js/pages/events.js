// Events: drains, XIDs, OOM kills, idle cancels, preemptions, as they happen
// (/api/v1/events/stream replays those kept, then sends each new one).

import { api, stream } from "../api.js";
import { h, clear, localTime, relative, announce, unavailable } from "../dom.js";

const KIND_LABELS = {
  drain: "Drain", resume: "Resume", xid: "XID error", hot: "Hot GPU", oom_kill: "Out of memory",
  idle_cancel: "Idle cancel", preemption: "Preemption", requeue: "Requeue", node_fail: "Node failure",
};
const MAX_SHOWN = 1000;

export function mount(main) {
  const live = h("span.live-dot", "connecting");
  const kind = h("select#e-kind", { onchange: () => draw() },
    h("option", { value: "" }, "all kinds"),
    Object.entries(KIND_LABELS).map(([k, t]) => h("option", { value: k }, t)));
  const body = h("tbody");
  const empty = h("p.muted", "Loading…");
  const table = h("table.data", h("caption.visually-hidden", "Events, newest first"),
    h("thead", h("tr", ["When", "Kind", "GPU", "Job", "What happened"].map((c) => h("th", { scope: "col" }, c)))), body);
  clear(main, h("div.toolbar", h("h1", "Events"), h("span.spacer"), live),
    h("form.toolbar", { onsubmit: (e) => e.preventDefault() }, h("label", { for: "e-kind" }, "Kind", kind)),
    empty, table);
  const events = new Map();
  let frame = 0;

  function add(event, quiet = false) {
    if (!event || events.has(event.id)) return;
    events.set(event.id, event);
    if (events.size > MAX_SHOWN) events.delete(events.keys().next().value);
    if (!quiet) announce(`${KIND_LABELS[event.kind] || event.kind}: ${event.message}`);
    if (!frame) frame = requestAnimationFrame(draw);
  }

  function draw() {
    frame = 0;
    const shown = [...events.values()].filter((e) => !kind.value || e.kind === kind.value).sort((a, b) => b.id - a.id);
    empty.textContent = shown.length ? "" : "No events yet: drains, XID errors, OOM kills, idle cancels and preemptions appear here as they happen.";
    table.hidden = !shown.length;
    body.replaceChildren(...shown.map((e) => h("tr",
      h("td", { title: localTime(e.at) }, relative(e.at)),
      h("td", KIND_LABELS[e.kind] || e.kind),
      h("td", e.gpu === null ? "-" : String(e.gpu)),
      h("td", e.job_id === null ? "-" : [h("a", { href: `/ui/jobs/${e.job_id}` }, String(e.job_id)), e.owner ? ` (${e.owner})` : ""]),
      h("td", e.message))));
  }

  // A resync (events lost from the ring before they were sent, or a restarted server whose
  // ids began again at 1) or a reconnect: the ring as it is now replaces what the page holds.
  let arriving = null; // events the stream sends while the ring is being read
  async function resync() {
    arriving = [];
    try {
      const kept = await api("/api/v1/events");
      events.clear();
      for (const e of kept) add(e, true);
      for (const e of arriving) add(e, true);
      draw();
    } catch { /* the stream goes on; the next resync tries again */ }
    finally { arriving = null; }
  }

  let replaying = true;
  const stop = stream("/api/v1/events/stream", { event: (e) => { if (arriving) arriving.push(e); add(e, replaying); } }, {
    onresync: resync,
    onstate: (on) => {
      live.classList.toggle("on", on);
      live.textContent = on ? "live" : "reconnecting…";
      if (on) setTimeout(() => { replaying = false; }, 500);
    },
    onmissing: async () => {
      live.textContent = "not live";
      try {
        for (const e of await api("/api/v1/events")) add(e, true);
        draw();
      } catch (err) {
        clear(main, h("h1", "Events"), err.missing ? unavailable("Events", "this server keeps no events list.") : h("p.error", err.message));
      }
    },
  });
  draw();
  const ticker = setInterval(() => { if (!document.hidden && events.size) draw(); }, 30000);
  return () => { stop(); clearInterval(ticker); if (frame) cancelAnimationFrame(frame); };
}
