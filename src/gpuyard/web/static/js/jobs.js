// What the queue and the job page say about a job, as `gpuyard queue` and `show` say it.

import { h, duration, relative, localTime, sizeMib } from "./dom.js";
import { api } from "./api.js";

export function shownState(job) {
  return job.display_state || job.state;
}

export function statePill(job) {
  const state = shownState(job);
  return h(`span.state.state-${state}`, job.held ? "HELD" : state);
}

/** `2`, or `1x8G` for a job sharing GPUs. */
export function gpusAsked(job) {
  return job.gpu_mem_mib ? `${job.num_gpus}x${sizeMib(job.gpu_mem_mib)}` : String(job.num_gpus);
}

export function gpuList(gpus) {
  return gpus && gpus.length ? gpus.join(",") : "-";
}

/** Time used: a running job's from its start, ticking; "0:00" before it starts. */
export function timeUsed(job, nowMs = Date.now()) {
  if (job.state === "RUNNING" && job.started_at) {
    return duration((nowMs - Date.parse(job.started_at)) / 1000);
  }
  return job.runtime_s !== null && job.runtime_s !== undefined ? duration(job.runtime_s) : "0:00";
}

/** squeue's NODELIST(REASON): a pending job's reason, a running job's node and GPUs. */
export function reasonText(job) {
  if (job.state === "PENDING") return job.reason || "-";
  if (job.state === "RUNNING") return `${job.node || "-"}:${gpuList(job.gpus)}`;
  return job.reason && job.reason !== "None" ? job.reason : "-";
}

/** The job page's "State reason": what holds a pending job, why an ended one ended; a
 * running job has none (its node and GPUs are facts of their own). */
export function stateReason(job) {
  if (job.state === "RUNNING") return "none: it is running";
  return job.reason && job.reason !== "None" ? job.reason : "-";
}

export function estimatedStart(job) {
  if (job.state !== "PENDING") return job.state === "RUNNING" ? "started" : "-";
  if (!job.estimated_start_at) return "-";
  const when = relative(job.estimated_start_at);
  return job.estimate_assumes === "preemption" ? `${when} (if preempting)` : when;
}

export function estimatedStartTitle(job) {
  return job.estimated_start_at ? localTime(job.estimated_start_at) : "";
}

/** May the logged-in user act on the job (their own; admins: all). */
export function mayAct(me, job) {
  return me && (me.role === "admin" || me.user === job.owner);
}

export const VERBS = {
  cancel: { label: "Cancel", path: (id) => `/api/v1/jobs/${id}/cancel`, past: "cancelled" },
  hold: { label: "Hold", path: (id) => `/api/v1/jobs/${id}/hold`, past: "held" },
  release: { label: "Release", path: (id) => `/api/v1/jobs/${id}/release`, past: "released" },
  restart: { label: "Restart", path: (id) => `/api/v1/jobs/${id}/restart`, past: "restarted" },
};

/** The verbs that apply to a job now. */
export function verbsFor(job) {
  if (job.state === "PENDING") return job.held ? ["release", "cancel"] : ["hold", "cancel"];
  if (job.state === "RUNNING") return ["cancel"];
  return ["restart"]; // ended: run it again (a new job, `gpuyard restart`)
}

export async function act(verb, job) {
  return api(VERBS[verb].path(job.id), { method: "POST" });
}
