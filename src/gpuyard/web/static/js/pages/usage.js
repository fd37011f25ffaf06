// Usage: GPU-hours allocated vs used per user or team (as `gpuyard usage`), and the running
// jobs whose GPUs sit idle.

import { api } from "../api.js";
import { h, clear, relative, localTime, unavailable } from "../dom.js";

const PERIODS = [["1", "last 24 hours"], ["7", "last 7 days"], ["30", "last 30 days"], ["365", "last year"]];

export function mount(main, { query }) {
  const by = h("select#u-by", { onchange: load }, h("option", { value: "user" }, "user"), h("option", { value: "team" }, "team"));
  by.value = query.get("by") === "team" ? "team" : "user";
  const period = h("select#u-period", { onchange: load }, PERIODS.map(([v, t]) => h("option", { value: v }, t)));
  period.value = "7";
  const table = h("div", { "aria-live": "polite" });
  const idle = h("div");
  clear(main,
    h("h1", "Usage"),
    h("form.toolbar", { onsubmit: (e) => e.preventDefault() },
      h("label", { for: "u-by" }, "Per", by), h("label", { for: "u-period" }, "Period", period)),
    table,
    h("h2", "Idle holders"),
    h("p.muted", "Running jobs whose GPUs have stayed unused (the server's idle detection)."),
    idle);

  async function load() {
    clear(table, h("p.muted", "Loading…"));
    const since = Date.now() / 1000 - Number(period.value) * 86400;
    try {
      const rows = await api("/api/v1/usage", { query: { by: by.value, since } });
      clear(table, rows.length ? usageTable(rows, by.value) : h("p.muted", "No job ran in this period."));
    } catch (err) {
      clear(table, err.status === 503 || err.missing ? unavailable("Usage", err.message) : h("p.error", err.message));
    }
  }

  async function loadIdle() {
    try {
      const jobs = await api("/api/v1/jobs", { query: { state: "RUNNING" } });
      const found = jobs.filter((j) => j.idle_since);
      clear(idle, found.length ? h("table.data",
        h("thead", h("tr", ["Job", "User", "Name", "GPUs", "Idle since"].map((c) => h("th", { scope: "col" }, c)))),
        h("tbody", found.map((j) => h("tr",
          h("td", h("a", { href: `/ui/jobs/${j.id}` }, String(j.id))), h("td", j.owner), h("td", j.name),
          h("td", j.gpus.join(",") || "-"), h("td", { title: localTime(j.idle_since) }, relative(j.idle_since))))))
        : h("p.muted", "None: every running job is using its GPUs."));
    } catch (err) {
      clear(idle, h("p.error", err.message));
    }
  }

  load();
  loadIdle();
  return null;
}

function usageTable(rows, by) {
  const fmt = (v, d = 1) => (v === null || v === undefined ? "n/a" : Number(v).toFixed(d));
  return h("table.data",
    h("caption.visually-hidden", `GPU-hours per ${by}`),
    h("thead", h("tr",
      h("th", { scope: "col" }, by === "team" ? "Team" : "User"),
      h("th.num", { scope: "col" }, "Jobs"),
      h("th.num", { scope: "col" }, "GPU-h allocated"),
      h("th.num", { scope: "col" }, "GPU-h used"),
      h("th", { scope: "col" }, "Used of allocated"),
      h("th.num", { scope: "col" }, "Mean util"),
      h("th.num", { scope: "col" }, "Energy (kWh)"),
      h("th", { scope: "col" }, "States"))),
    h("tbody", rows.map((r) => {
      const share = r.used_gpu_h !== null && r.allocated_gpu_h > 0 ? Math.min(100, (100 * r.used_gpu_h) / r.allocated_gpu_h) : null;
      const meter = h("span.meter", { "aria-hidden": "true" }, h("span"));
      meter.firstChild.style.width = `${share ?? 0}%`;
      return h("tr",
        h("td", r.key),
        h("td.num", String(r.jobs)),
        h("td.num", fmt(r.allocated_gpu_h, 2)),
        h("td.num", fmt(r.used_gpu_h, 2)),
        h("td", meter, share === null ? "n/a" : `${share.toFixed(0)}%`),
        h("td.num", r.util_mean_pct === null ? "n/a" : `${r.util_mean_pct.toFixed(0)}%`),
        h("td.num", r.energy_kwh === null || r.energy_kwh === undefined ? "n/a" : r.energy_kwh.toFixed(3)),
        h("td", Object.entries(r.states || {}).map(([s, n]) => `${s.toLowerCase()} ${n}`).join(", ")));
    })));
}
