// A job: its state timeline, live log tail, progress, metric charts, its GPUs' history and
// the --gpu-mem its peak suggests. Live: the change feed says when the job changes; the log is
// followed as a stream (GET .../log?follow=true) while it runs.

import { api, stream, isTerminal, whileHidden } from "../api.js";
import { h, clear, duration, localTime, relative, sizeMib, suggestedGpuMemMib, notice, announce, unavailable, terminalText } from "../dom.js";
import { statePill, shownState, gpusAsked, gpuList, stateReason, mayAct, verbsFor, act, VERBS } from "../jobs.js";
import { lineChart, columns, joined } from "../charts.js";

const LOG_TAIL_LINES = 200;
const LOG_KEEP_CHARS = 200_000; // what the page keeps of a long log (the tail)
const PROGRESS_EVERY_MS = 2000;
const CHARTS_EVERY_MS = 10000;

export function mount(main, { me, params, navigate }) {
  const id = Number(params[0]);
  let job = null;
  let stopped = false;
  const timers = [];
  const charts = new Map(); // key -> chart
  let logAbort = null;
  let logFollowing = false;

  const title = h("h1", `Job ${id}`); // kept (not redrawn): it holds the focus after navigation
  const headInfo = h("span.job-head");
  const head = h("div.job-head", title, headInfo);
  const actions = h("div.toolbar");
  const facts = h("dl.facts");
  const timeline = h("ol.timeline");
  const progress = h("div", { "aria-live": "polite" });
  const gpuMem = h("div");
  const gpuUse = h("div"); // its GPUs' utilisation and GPU-hours, over the charts
  const metricCharts = h("div.charts");
  const gpuCharts = h("div.charts");
  const log = h("pre.log", { tabindex: "0", "aria-label": "Job output (last lines)" });
  const logState = h("span.muted");
  clear(main, head, actions,
    h("div.two-col",
      h("section", { "aria-labelledby": "p-title" }, h("h2#p-title", "Progress"), progress, h("h2", "GPU memory"), gpuMem),
      h("section", { "aria-labelledby": "t-title" }, h("h2#t-title", "Timeline"), timeline)),
    h("section", { "aria-labelledby": "m-title" }, h("h2#m-title", "Metrics"), metricCharts),
    h("section", { "aria-labelledby": "g-title" }, h("h2#g-title", "GPU use"), gpuUse, gpuCharts),
    h("section", { "aria-labelledby": "l-title" }, h("div.toolbar", h("h2#l-title", "Output"), logState), log),
    h("section", { "aria-labelledby": "f-title" }, h("h2#f-title", "Details"), facts));

  async function loadJob() {
    try {
      const was = job && job.state;
      job = await api(`/api/v1/jobs/${id}`);
      drawJob();
      if (was && was !== job.state) announce(`Job ${id} is ${shownState(job).toLowerCase()}`);
      if (!logFollowing && job.state !== "PENDING") followLog();
      else if (!logFollowing && !log.textContent) log.textContent = "(not started yet)";
    } catch (err) {
      clear(main, h("h1", `Job ${id}`),
        h("p.error", { role: "alert" }, err.status === 404 ? `Job ${id} is not found (or is not yours to see).` : err.message),
        h("p", h("a", { href: "/ui/" }, "Back to the queue")));
      stopped = true;
      cleanup();
    }
  }

  function drawJob() {
    document.title = `Job ${job.id} ${job.name} · gpuyard`;
    clear(headInfo, h("span.muted", job.name), statePill(job),
      h("span.muted", `${job.owner} · ${gpusAsked(job)} GPU${job.num_gpus === 1 ? "" : "s"}`));
    const verbs = mayAct(me, job) ? verbsFor(job) : [];
    const canRead = mayAct(me, job) && job.state !== "PENDING";
    clear(actions, verbs.map((verb) => h(`button${verb === "cancel" ? ".danger" : ""}`, { type: "button", onclick: () => run(verb) },
      `${VERBS[verb].label} job ${job.id}`)),
    canRead && isTerminal(job.state) ? h("button", { type: "button", onclick: downloadLog }, "Download log") : null,
    h("a", { href: "/ui/" }, "← Queue"));
    drawFacts();
    drawTimeline();
    drawGpuMem();
  }

  async function run(verb) {
    if (verb === "cancel" && job.state === "RUNNING" && !confirm(`Cancel running job ${job.id}?`)) return;
    try {
      const done = await act(verb, job);
      if (verb === "restart") { // a new job: its own page
        notice(`Job ${id} restarted as job ${done.id}.`, "ok");
        navigate(`/ui/jobs/${done.id}`);
        return;
      }
      job = done;
      notice(`Job ${job.id} ${VERBS[verb].past}.`, "ok");
      drawJob();
    } catch (err) {
      notice(`${VERBS[verb].label} job ${id}: ${err.message}`);
    }
  }

  function drawFacts() {
    const items = [
      ["Command", h("code", job.command.length ? job.command.map(quote).join(" ") : "(not shown)")],
      ["Working directory", job.workdir || "-"],
      ["State reason", stateReason(job)],
      ["GPUs", `${gpusAsked(job)} requested, held: ${gpuList(job.gpus)}`],
      ["GPU memory", job.gpu_mem_mib ? `${sizeMib(job.gpu_mem_mib)} per GPU (may share its GPUs)` : job.num_gpus ? "whole GPUs" : "-"],
      ["CPUs", String(job.cpus)],
      ["Memory", sizeMib(job.mem_mib)],
      ["Time limit", job.time_limit_s ? duration(job.time_limit_s) : "UNLIMITED"],
      ["Run time", job.runtime_s !== null ? duration(job.runtime_s) : "-"],
      ["Node", job.node || "-"],
      ["Priority", String(job.priority)],
      ["Exit code", job.exit_code === null ? "-" : String(job.exit_code)],
      ["Estimated start", job.state === "PENDING" && job.estimated_start_at ? `${relative(job.estimated_start_at)} (${localTime(job.estimated_start_at)})${job.estimate_assumes === "preemption" ? ", if the policy preempts" : ""}` : "-"],
      ["Restarts", String(job.restarts)],
      ["Retries", job.retries ? `${job.retries} (on ${job.retry_on.length ? job.retry_on.join(", ") : "failed"})` : "none"],
      ["Preemptible", job.preemptible ? "yes" : "no"],
      ["GPU time", `${(job.attained_gpu_s / 3600).toFixed(2)} GPU-hours, all runs`],
      ["Log", job.log_path ? h("code", job.log_path) : "-"],
    ];
    if (job.idle_since) items.push(["Idle", `GPUs unused since ${localTime(job.idle_since)}`]);
    if (job.log_dropped_bytes) items.push(["Log lost", `${job.log_dropped_bytes} bytes (disk full)`]);
    clear(facts, items.map(([k, v]) => [h("div", h("dt", k), h("dd", v))]));
  }

  function drawTimeline() {
    const steps = [["Submitted", job.submitted_at, ""]];
    for (const a of job.attempts || []) {
      steps.push([`Run ${a.number} started${where(a.node, a.gpus)}`, a.started_at, ""]);
      const requeued = a.state === "PENDING";
      steps.push([`Run ${a.number} ${requeued ? "stopped and requeued" : `ended ${a.state}`}${a.exit_code !== null ? ` (exit ${a.exit_code})` : ""}${a.reason && a.reason !== "None" ? `: ${a.reason}` : ""}`,
        a.ended_at, requeued ? "" : "bad"]);
    }
    const run = (job.attempts || []).length + 1;
    if (job.not_before && job.state === "PENDING") steps.push([`Not before (retry backoff)`, job.not_before, ""]);
    if (job.started_at) steps.push([`${run > 1 ? `Run ${run} started` : "Started"}${where(job.node, job.gpus)}`, job.started_at, ""]);
    if (job.ended_at) {
      steps.push([`Ended ${job.state}${job.exit_code !== null ? ` (exit ${job.exit_code})` : ""}${job.reason && job.reason !== "None" ? `: ${job.reason}` : ""}`,
        job.ended_at, job.state === "COMPLETED" ? "ok" : "bad"]);
    } else if (job.state === "PENDING") {
      steps.push([`Waiting: ${job.reason}${job.estimated_start_at ? `, estimated start ${relative(job.estimated_start_at)}` : ""}`, null, ""]);
    } else if (job.state === "RUNNING") {
      steps.push([`Running for ${job.started_at ? duration((Date.now() - Date.parse(job.started_at)) / 1000) : "-"}`, null, ""]);
    }
    clear(timeline, steps.map(([what, when, kind]) => h(`li${kind ? `.${kind}` : ""}`, what,
      when ? h("span.when", { title: when }, localTime(when)) : null)));
  }

  // The GPUs' energy while it ran (its share of a shared GPU): kWh, and where it came from.
  function energyText(stats) {
    if (stats.energy_j === null || stats.energy_j === undefined) return "n/a (no power reading)";
    const how = stats.energy_integrated ? "power x time" : "the GPUs' energy counters";
    return `${(stats.energy_j / 3.6e6).toFixed(4)} kWh (${Math.round(stats.energy_j)} J, from ${how})`;
  }

  function drawGpuMem() {
    const stats = job.gpu_stats;
    if (!job.num_gpus && !job.gpu_mem_mib) { clear(gpuMem, h("p.muted", "This job uses no GPU.")); return; }
    if (!stats) { clear(gpuMem, h("p.muted", "No GPU telemetry for this job (no NVML, or it has not run yet): no suggestion.")); return; }
    const perGpu = stats.memory_peak_per_gpu_mib ?? (job.num_gpus <= 1 ? stats.memory_peak_mib : null);
    const util = stats.util_mean_pct === null ? "n/a" : `mean ${stats.util_mean_pct.toFixed(0)}%, peak ${stats.util_peak_pct}%`;
    clear(gpuUse, h("p", `Utilisation ${util}; ${stats.gpu_hours.toFixed(3)} GPU-hours sampled over ${duration(stats.sampled_s)}.`),
      h("p.energy", `Energy: ${energyText(stats)}.`));
    clear(gpuMem,
      perGpu ? [
        h("p", `Peak GPU memory: ${sizeMib(perGpu)} on one GPU${stats.memory_peak_mib && job.num_gpus > 1 ? ` (${sizeMib(stats.memory_peak_mib)} over all its GPUs)` : ""}.`),
        h("p", h("strong", "Suggested: "), h("code", `--gpu-mem ${sizeMib(suggestedGpuMemMib(perGpu))}`),
          h("span.muted", " (its peak and a quarter more: it may then share a GPU with other jobs)")),
      ] : h("p.muted", "Its GPU memory was not seen: no suggestion."));
  }

  // --- progress
  async function loadProgress() {
    try {
      drawProgress(await api(`/api/v1/jobs/${id}/progress`));
    } catch (err) {
      // The job itself was found: a 404 here is a server without the progress route.
      clear(progress, err.missing ? unavailable("Progress", "this server does not report job progress.") : h("p.error", err.message));
    }
  }

  function drawProgress(p) {
    if (p.step === null && !Object.keys(p.metrics || {}).length) {
      const ended = job && isTerminal(job.state);
      clear(progress, h("p.muted", ended ? "This job reported no progress. A job reports it with " : "No progress reported yet. A job reports it with ", h("code", "gpuyard.progress(step, total=…)"),
        ", a ", h("code", "::gpuyard progress step=10 total=100"), " line, or a tqdm, Lightning or Hugging Face progress line."));
      return;
    }
    const pct = p.fraction !== null ? Math.round(p.fraction * 1000) / 10 : null;
    const bar = h("div.progress", { role: "progressbar", "aria-label": `Job ${id} progress`, "aria-valuemin": "0", "aria-valuemax": "100",
      "aria-valuenow": pct === null ? null : String(pct), "aria-valuetext": pct === null ? `step ${p.step}` : `${pct}%` }, h("span"));
    bar.firstChild.style.width = `${pct ?? 0}%`;
    const parts = [
      p.total ? `step ${p.step} of ${p.total}` : `step ${p.step}`,
      pct !== null ? `${pct}%` : null,
      p.rate_per_s ? `${p.rate_per_s >= 1 ? p.rate_per_s.toFixed(1) : p.rate_per_s.toFixed(3)} steps/s` : null,
      p.eta_s !== null && !isTerminal(job ? job.state : "") ? `about ${duration(p.eta_s)} left` : null,
    ].filter(Boolean);
    clear(progress, bar, h("p", parts.join(" · ")),
      Object.keys(p.metrics).length ? h("p", Object.entries(p.metrics).map(([k, v], i) => [i ? " · " : "", h("span.muted", `${k} `), h("span.mono", fmtMetric(v))])) : null,
      p.updated_at ? h("p.hint", `reported ${relative(p.updated_at)}${p.source ? ` (${p.source})` : ""}`) : null);
  }

  // --- charts
  async function loadCharts() {
    await Promise.all([loadSeries(), loadGpuHistory()]);
  }

  async function loadSeries() {
    let out;
    try {
      out = await api(`/api/v1/jobs/${id}/series`, { query: { max_points: 500 } });
    } catch (err) {
      clear(metricCharts, err.missing ? unavailable("Metric series", "") : h("p.error", err.message));
      return;
    }
    const names = Object.keys(out.series).filter((n) => out.series[n].length).sort((a, b) => (a === "step") - (b === "step") || a.localeCompare(b));
    if (!names.length) {
      if (![...charts.keys()].some((k) => k.startsWith("m:"))) {
        clear(metricCharts, h("p.muted", job && isTerminal(job.state) ? "This job reported no metric." : "No metric reported yet."));
      }
      return;
    }
    if (!metricCharts.querySelector(".chart")) clear(metricCharts);
    for (const name of names) await drawChart(metricCharts, `m:${name}`, name, [{ label: name }], columns(out.series[name]));
  }

  async function loadGpuHistory() {
    let out;
    try {
      out = await api(`/api/v1/jobs/${id}/gpu-history`, { query: { max_points: 600 } });
    } catch (err) {
      clear(gpuCharts, err.missing ? unavailable("GPU history", "") : h("p.error", err.message));
      return;
    }
    const gpus = out.gpus.filter((g) => g.samples.length);
    if (!gpus.length) {
      clear(gpuCharts, h("p.muted", job && !job.num_gpus && !job.gpu_mem_mib ? "This job uses no GPU."
        : "No GPU samples for this job (its GPUs are declared, not read through NVML, or it has not run yet)."));
      return;
    }
    if (!gpuCharts.querySelector(".chart")) clear(gpuCharts);
    const lines = gpus.map((g) => ({ label: `GPU ${g.index}` }));
    const table = (col) => gpus.map((g) => [g.samples.map((s) => s[0]), g.samples.map((s) => s[col])]);
    await drawChart(gpuCharts, "g:util", "Utilisation (%)", lines.map((l) => ({ ...l, unit: "%" })), await joined(table(1)), [0, 100]);
    await drawChart(gpuCharts, "g:mem", "Memory used (MiB)", lines.map((l) => ({ ...l, unit: " MiB" })), await joined(table(2)));
    await drawChart(gpuCharts, "g:temp", "Temperature (°C)", lines.map((l) => ({ ...l, unit: "°C" })), await joined(table(3)));
    if (gpus.some((g) => g.samples.some((s) => s[4] !== null))) {
      await drawChart(gpuCharts, "g:power", "Power (W)", lines.map((l) => ({ ...l, unit: " W" })), await joined(table(4)));
    }
  }

  async function drawChart(container, key, title, lines, data, yRange = null) {
    const existing = charts.get(key);
    if (existing && existing.lines === lines.length) { existing.chart.update(data); return; }
    if (existing) { existing.chart.destroy(); existing.box.remove(); }
    const box = h("div.chart");
    container.append(box);
    try {
      const chart = await lineChart(box, title, lines, data, { yRange });
      if (stopped) { chart.destroy(); return; }
      charts.set(key, { chart, box, lines: lines.length });
    } catch (err) {
      box.replaceChildren(h("p.error", `${title}: ${err.message}`));
    }
  }

  // --- log: the last lines, then followed as a stream while the job runs
  async function followLog() {
    logFollowing = true;
    logAbort = new AbortController();
    const live = job && !isTerminal(job.state);
    logState.textContent = live ? "following…" : "";
    let text = "";
    try {
      const response = await api(`/api/v1/jobs/${id}/log`, { raw: true, query: { tail: LOG_TAIL_LINES, follow: live ? "true" : null },
        headers: { Accept: "text/plain" } });
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      for (;;) {
        const { value, done } = await readWithSignal(reader, logAbort.signal);
        if (done) break;
        text += decoder.decode(value, { stream: true });
        if (text.length > LOG_KEEP_CHARS) text = text.slice(text.length - LOG_KEEP_CHARS);
        showLog(text);
      }
      text += decoder.decode();
      showLog(text);
      logState.textContent = live ? "ended" : "";
      if (!text) log.textContent = job && job.state === "PENDING" ? "(not started yet)" : "(no output)";
    } catch (err) {
      if (err.name === "AbortError") return;
      logState.textContent = "";
      log.textContent = `The output could not be read: ${err.message}`;
    } finally {
      logFollowing = false;
    }
  }

  function showLog(text) {
    const atBottom = log.scrollHeight - log.scrollTop - log.clientHeight < 40;
    log.textContent = terminalText(text); // a tqdm bar's last frame, as a terminal shows it
    if (atBottom) log.scrollTop = log.scrollHeight;
  }

  // The whole log as a file (its raw bytes, as `gpuyard logs ID > FILE` writes them).
  async function downloadLog() {
    try {
      const response = await api(`/api/v1/jobs/${id}/log`, { raw: true, headers: { Accept: "text/plain" } });
      const url = URL.createObjectURL(await response.blob());
      const link = h("a", { href: url, download: `job-${id}.log` });
      document.body.append(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60_000);
    } catch (err) {
      notice(`The log of job ${id} could not be downloaded: ${err.message}`);
    }
  }

  // --- live
  const stopFeed = stream("/api/v1/jobs/changes", {
    job: (change) => {
      if (change.id !== id) return;
      loadJob();
      loadProgress();
      if (isTerminal(change.state)) loadCharts(); // the last points
    },
  }, { onresync: () => loadJob() });

  function every(ms, fn) {
    timers.push(setInterval(() => {
      if (!document.hidden && job && job.state === "RUNNING") fn();
    }, ms));
  }

  // A hidden tab lets the log's stream go too (see api.js whileHidden), and reads the tail
  // again when shown.
  const logWhileHidden = whileHidden(() => { if (logAbort) logAbort.abort(); }, () => {
    if (!stopped && !logFollowing && job && job.state !== "PENDING") followLog();
  });

  function cleanup() {
    logWhileHidden.stop();
    stopFeed();
    for (const t of timers) clearInterval(t);
    if (logAbort) logAbort.abort();
    for (const { chart } of charts.values()) chart.destroy();
    charts.clear();
  }

  (async () => {
    await loadJob();
    if (stopped) return;
    loadProgress();
    loadCharts();
    every(PROGRESS_EVERY_MS, loadProgress);
    every(CHARTS_EVERY_MS, loadCharts);
    every(1000, drawTimeline);
  })();

  return () => { stopped = true; cleanup(); };
}

function readWithSignal(reader, signal) {
  if (signal.aborted) { reader.cancel().catch(() => {}); return Promise.reject(new DOMException("aborted", "AbortError")); }
  return new Promise((resolve, reject) => {
    const onAbort = () => { reader.cancel().catch(() => {}); reject(new DOMException("aborted", "AbortError")); };
    signal.addEventListener("abort", onAbort, { once: true });
    reader.read().then((r) => { signal.removeEventListener("abort", onAbort); resolve(r); },
      (e) => { signal.removeEventListener("abort", onAbort); reject(e); });
  });
}

/** " on node:GPUs", " on node" for a job without GPUs. */
function where(node, gpus) {
  if (!node) return "";
  return gpus && gpus.length ? ` on ${node}, GPU${gpus.length > 1 ? "s" : ""} ${gpuList(gpus)}` : ` on ${node}`;
}

function quote(arg) {
  return /^[\w@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replace(/'/g, "'\"'\"'")}'`;
}

function fmtMetric(v) {
  if (v === null || v === undefined) return "–";
  const a = Math.abs(v);
  return a !== 0 && (a < 0.001 || a >= 1e6) ? v.toExponential(3) : String(+v.toFixed(a >= 100 ? 1 : 4));
}
