// The GPUs board: a card per GPU, live from /api/v1/gpus/stream (once a second when anything
// changes): utilisation, memory, temperature, power, who holds it, shared memory left, flags;
// drain and resume for admins.

import { api, stream } from "../api.js";
import { h, clear, sizeMib, num, notice, announce } from "../dom.js";

export function mount(main, { me }) {
  const admin = me.role === "admin";
  const live = h("span.live-dot", "connecting");
  const cards = h("div.boards", { "aria-live": "off" });
  const summary = h("p.muted");
  clear(main, h("div.toolbar", h("h1", "GPUs"), h("span.spacer"), live), summary, cards);
  let gpus = [];
  let grouped = false; // a board per machine: each GPU's heading one level below its machine's

  function draw(list) {
    gpus = list;
    const busy = list.filter((g) => (g.jobs && g.jobs.length) || g.job !== null).length;
    const drained = list.filter((g) => g.drained).length;
    summary.textContent = list.length
      ? `${list.length} GPU${list.length === 1 ? "" : "s"}: ${busy} in use, ${list.length - busy - drained} free${drained ? `, ${drained} drained` : ""}.`
      : "This server has no GPUs.";
    // Keep the focused button across redraws (the list is redrawn once a second).
    const focused = document.activeElement && document.activeElement.dataset.key;
    // A cluster's GPUs, a board per machine (in the server's order); one machine: one board.
    const machines = [...new Set(list.map((g) => g.node))];
    grouped = machines.length > 1;
    cards.replaceChildren(...(machines.length > 1
      ? machines.map((node) => {
        const here = list.filter((g) => g.node === node);
        return h("section.machine", { "aria-label": `Machine ${node}` },
          h("h2", `${node} · ${here.length} GPU${here.length === 1 ? "" : "s"}`),
          h("div.cards", here.map(card)));
      })
      : [h("div.cards", list.map(card))]));
    if (focused) {
      const again = cards.querySelector(`[data-key="${focused}"]`);
      if (again) again.focus();
    }
  }

  function card(g) {
    const jobs = g.jobs && g.jobs.length ? g.jobs : g.job !== null ? [g.job] : [];
    const memPct = g.memory_used_mib !== null && g.memory_total_mib ? (100 * g.memory_used_mib) / g.memory_total_mib : null;
    const powerPct = g.power_w !== null && g.power_limit_w ? (100 * g.power_w) / g.power_limit_w : null;
    const flags = [];
    if (g.drained) flags.push(h("span.flag", { title: g.drain_reason || "" }, `drained${g.drain_reason ? `: ${g.drain_reason}` : ""}`));
    if (g.hot) flags.push(h("span.flag.warn", { title: g.hot }, `hot: ${g.hot}`));
    if (g.xid_errors) flags.push(h("span.flag", `XID ×${g.xid_errors} (last ${g.last_xid})`));
    if (g.ecc_errors_uncorrected) flags.push(h("span.flag", `${g.ecc_errors_uncorrected} uncorrected ECC`));
    if (g.error) flags.push(h("span.flag", `unreadable: ${g.error}`));
    if (!g.detected) flags.push(h("span.flag.info", "declared (no telemetry)"));
    const misplaced = (g.processes || []).filter((p) => p.misplaced);
    if (misplaced.length) flags.push(h("span.flag", `process of job ${misplaced.map((p) => p.job).join(",")} not allocated here`));
    const label = `GPU ${g.index}`;
    return h(`section.card${g.drained ? ".drained" : ""}`, { "aria-label": label },
      h("header", h(grouped ? "h3" : "h2", label),
        h("span.name", g.name)),
      metric("Utilisation", g.util_pct, g.util_pct === null ? "n/a" : `${g.util_pct}%`),
      metric("Memory", memPct, g.memory_used_mib === null ? (g.memory_total_mib ? `n/a / ${sizeMib(g.memory_total_mib)}` : "n/a")
        : `${gib(g.memory_used_mib)} / ${gib(g.memory_total_mib || 0)}G`),
      metric("Temperature", g.temperature_c === null ? null : Math.min(100, g.temperature_c), num(g.temperature_c, "°C"), g.temperature_c !== null && g.temperature_c >= 85),
      metric("Power", powerPct, g.power_w === null ? "n/a" : g.power_limit_w ? `${g.power_w.toFixed(0)} / ${g.power_limit_w.toFixed(0)}W` : `${g.power_w.toFixed(0)}W`),
      h("div", h("span.muted", "Held by: "), jobs.length
        ? jobs.map((id, i) => [i ? ", " : "", h("a", { href: `/ui/jobs/${id}` }, `job ${id}`)]).concat(g.user && jobs.length === 1 ? [` (${g.user})`] : [])
        : h("span", "nobody (free)")),
      g.shared_free_mib !== null && g.shared_free_mib !== undefined
        ? h("div", h("span.muted", "Shared (--gpu-mem): "), `${sizeMib(g.shared_free_mib) === "-" ? "0" : sizeMib(g.shared_free_mib)} free to share`) : null,
      processes(g),
      flags.length ? h("div.flags", flags) : null,
      admin ? h("div", g.drained
        ? h("button", { type: "button", "data-key": `resume-${g.index}`, onclick: () => resume(g) }, `Resume GPU ${g.index}`)
        : drainForm(g)) : null,
    );
  }

  function processes(g) {
    const list = g.processes || [];
    if (!list.length) return null;
    return h("ul.procs", { "aria-label": `Processes on GPU ${g.index}` }, list.slice(0, 6).map((p) => h("li",
      h("span.mono", `pid ${p.pid}`), " ", h("span.mono", sizeMib(p.memory_used_mib)), " ",
      p.job !== null ? [h("a", { href: `/ui/jobs/${p.job}` }, `job ${p.job}`), p.user ? ` (${p.user})` : ""] : h("span.muted", "not a gpuyard job"))),
      list.length > 6 ? h("li.muted", `and ${list.length - 6} more`) : null);
  }

  function gib(mib) {
    const v = mib / 1024;
    return v >= 100 ? v.toFixed(0) : v.toFixed(1);
  }

  function metric(label, pct, text, hot = false) {
    const bar = h(`div.bar${hot ? ".hot" : ""}`, { role: "meter", "aria-label": label, "aria-valuemin": "0", "aria-valuemax": "100",
      "aria-valuenow": pct === null ? null : String(Math.round(pct)), "aria-valuetext": text }, h("span"));
    bar.firstChild.style.width = `${pct === null ? 0 : Math.max(0, Math.min(100, pct))}%`;
    return h("div.metric", h("span.label", label), bar, h("span.value", text));
  }

  // Drain forms stay open across redraws: their state lives here, not in the DOM.
  const drafts = new Map(); // index -> {reason, now}

  function drainForm(g) {
    const draft = drafts.get(g.index);
    if (!draft) {
      return h("button.danger", { type: "button", "data-key": `drain-${g.index}`,
        onclick: () => { drafts.set(g.index, { reason: "maintenance", now: false, focus: true }); draw(gpus); } }, `Drain GPU ${g.index}…`);
    }
    const reason = h(`input#drain-reason-${g.index}`, { value: draft.reason, maxlength: "200", "data-key": `reason-${g.index}`,
      oninput: () => { draft.reason = reason.value; } });
    const now = h(`input#drain-now-${g.index}`, { type: "checkbox", checked: draft.now, "data-key": `now-${g.index}`,
      onchange: () => { draft.now = now.checked; } });
    if (draft.focus) { draft.focus = false; queueMicrotask(() => { reason.focus(); reason.select(); }); }
    return h("form.drain", { onsubmit: (e) => { e.preventDefault(); drain(g, draft); }, "aria-label": `Drain GPU ${g.index}` },
      h("label", { for: reason.id }, "Why (shown to users)", reason),
      h("label.inline", { for: now.id }, now, "stop its jobs now and requeue them (else they finish)"),
      h("div.toolbar",
        h("button.danger", { type: "submit", "data-key": `confirm-${g.index}` }, `Drain GPU ${g.index}`),
        h("button", { type: "button", "data-key": `keep-${g.index}`, onclick: () => { drafts.delete(g.index); draw(gpus); } }, "Keep in service")));
  }

  async function drain(g, draft) {
    try {
      const out = await api(`/api/v1/gpus/${g.index}/drain`, { method: "POST", body: { reason: draft.reason.trim(), now: draft.now } });
      drafts.delete(g.index);
      const left = out.running_jobs && out.running_jobs.length ? ` Jobs ${out.running_jobs.join(", ")} finish there first.` : "";
      const requeued = out.requeued_jobs && out.requeued_jobs.length ? ` Jobs ${out.requeued_jobs.join(", ")} were requeued.` : "";
      notice(`GPU ${g.index} drained.${left}${requeued}`, "ok");
      announce(`GPU ${g.index} drained`);
      draw(await api("/api/v1/gpus"));
    } catch (err) {
      notice(`Drain GPU ${g.index}: ${err.message}`);
    }
  }

  async function resume(g) {
    try {
      await api(`/api/v1/gpus/${g.index}/resume`, { method: "POST" });
      notice(`GPU ${g.index} is back in service.`, "ok");
      announce(`GPU ${g.index} resumed`);
      draw(await api("/api/v1/gpus"));
    } catch (err) {
      notice(`Resume GPU ${g.index}: ${err.message}`);
    }
  }

  // The list at once, then the stream (a server without the stream: the list, refreshed).
  api("/api/v1/gpus").then(draw).catch((err) => clear(cards, h("p.error", `The GPUs could not be read: ${err.message}`)));
  let poll = null;
  const stop = stream("/api/v1/gpus/stream", { gpus: draw }, {
    onstate: (on) => { live.classList.toggle("on", on); live.textContent = on ? "live" : "reconnecting…"; },
    onmissing: () => {
      live.textContent = "refreshed every 5 s (no live stream on this server)";
      poll = setInterval(() => api("/api/v1/gpus").then(draw).catch(() => {}), 5000);
    },
  });
  return () => { stop(); clearInterval(poll); };
}

