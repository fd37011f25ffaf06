// The queue: pending and running jobs, live from the change feed (each change applied to its
// row; no refetch of the whole queue), filtered in the browser, drawn as a virtual list so
// 10,000 jobs cost only the ~30 rows on screen.

import { api, stream, isTerminal } from "../api.js";
import { h, clear, announce, notice } from "../dom.js";
import {
  statePill, gpusAsked, timeUsed, reasonText, estimatedStart, estimatedStartTitle, mayAct,
  verbsFor, act, VERBS,
} from "../jobs.js";

const ROW_H = 34;
const OVERSCAN = 8;
const FIRST_PAGE = 200; // drawn first; the rest of the queue follows in one request
const NEW_JOBS_DELAY_MS = 100;
const REREAD_MAX = 300; // changed jobs read one by one up to this many at once
const REREAD_PARALLEL = 6;
const ESTIMATE_EVERY_MS = 3000; // estimates on screen are read again this long after a start or end
const ESTIMATE_TRIES = 6; // a missing estimate is asked for again this often (3 s, 6 s, 12 s, ...)
const PROGRESS_EVERY_MS = 5000; // the running jobs on screen: their progress read again this often
// [class, heading]: the class lets a narrow window drop a column (css/app.css).
const COLUMNS = [["c-sel", ""], ["c-job", "Job"], ["c-user", "User"], ["c-name", "Name"], ["c-state", "State"],
  ["c-gpus", "GPUs"], ["c-time", "Time"], ["c-progress", "Progress"], ["c-reason", "Reason / node:GPUs"],
  ["c-est", "Est. start"], ["c-actions", "Actions"]];

export function mount(main, { me, query, navigate }) {
  const jobs = new Map(); // id -> JobOut (+ _v: the version its last change carried)
  let view = []; // the jobs the filters keep, by id
  let activeId = null;
  let visible = []; // the jobs drawn now (the estimates' refresh reads only these)
  let buffering = null; // changes that arrive while the whole queue is being read
  let loaded = false;
  const picked = new Set(); // ids ticked for a bulk cancel
  const progress = new Map(); // id -> "42%" / "step 120": running jobs' progress, as last read
  const filters = {
    state: query.get("state") || "",
    user: query.get("user") || "",
    name: query.get("name") || "",
  };

  // --- layout
  const count = h("span.count", { "aria-live": "polite" }, "Loading…");
  const live = h("span.live-dot", "connecting");
  const stateSelect = h("select#f-state", { onchange: () => setFilter("state", stateSelect.value) },
    h("option", { value: "" }, "Pending and running"),
    h("option", { value: "PENDING" }, "Pending"),
    h("option", { value: "RUNNING" }, "Running"),
    h("option", { value: "HELD" }, "Held"));
  stateSelect.value = filters.state;
  const userInput = h("input#f-user", { type: "search", value: filters.user, placeholder: "anyone",
    autocomplete: "off", oninput: () => setFilter("user", userInput.value.trim()) });
  const nameInput = h("input#f-name", { type: "search", value: filters.name, placeholder: "any",
    autocomplete: "off", oninput: () => setFilter("name", nameInput.value.trim()) });
  const mine = h("button", { type: "button", "aria-pressed": String(filters.user === me.user),
    onclick: () => {
      const value = filters.user === me.user ? "" : me.user;
      userInput.value = value;
      setFilter("user", value);
    } }, "My jobs");

  const selection = h("div.toolbar.selection", { "aria-label": "Selected job" });
  const bulk = h("div.toolbar.bulk", { "aria-label": "Ticked jobs", hidden: true });
  const pickAll = h("input", { type: "checkbox", "aria-label": "Tick every job shown that is yours to cancel",
    onchange: () => { for (const job of view) if (mayAct(me, job)) (pickAll.checked ? picked.add(job.id) : picked.delete(job.id)); draw(); } });
  const head = h("div.grid-head", { role: "row", "aria-rowindex": "1" },
    COLUMNS.map(([cls, c]) => h(`span.${cls}`, { role: "columnheader" }, cls === "c-sel" ? pickAll : c)));
  const spacer = h("div", { "aria-hidden": "true" });
  const rows = h("div");
  const body = h("div.grid-body", { role: "rowgroup", onscroll: () => schedule() }, spacer, rows);
  // The grid takes the focus (one Tab stop) and moves its active row with the keys; rows are
  // not focused themselves (most of them do not exist: virtual list).
  const grid = h("div.grid", { role: "grid", tabindex: "0", "aria-label": "Queue: arrows or j/k move, Enter opens the job",
    "aria-rowcount": "1", onkeydown: onKey }, head, body);

  clear(main,
    h("div.toolbar",
      h("h1", "Queue"), h("span.spacer"), live,
      h("button", { type: "button", onclick: () => loadAll(), title: "Read the whole queue again (estimates too)" }, "Refresh")),
    h("form.toolbar", { role: "search", "aria-label": "Filter jobs", onsubmit: (e) => e.preventDefault() },
      h("label", { for: "f-state" }, "State", stateSelect),
      h("label", { for: "f-user" }, "User", userInput),
      h("label", { for: "f-name" }, "Name contains", nameInput),
      mine, h("span.spacer"), count),
    bulk, selection, grid);

  // --- data
  function matches(job) {
    if (isTerminal(job.state)) return false;
    if (filters.state === "HELD" ? !job.held : filters.state && job.state !== filters.state) return false;
    if (filters.user && job.owner !== filters.user) return false;
    if (filters.name && !job.name.toLowerCase().includes(filters.name.toLowerCase())) return false;
    return true;
  }

  let viewDirty = true;
  function rebuildView() {
    view = [];
    for (const job of jobs.values()) if (matches(job)) view.push(job);
    view.sort((a, b) => a.id - b.id);
    viewDirty = false;
  }

  function setFilter(key, value) {
    filters[key] = value;
    mine.setAttribute("aria-pressed", String(filters.user === me.user));
    const params = new URLSearchParams();
    for (const [k, v] of Object.entries(filters)) if (v) params.set(k, v);
    const search = params.toString();
    history.replaceState(null, "", `/ui/${search ? `?${search}` : ""}`);
    viewDirty = true;
    body.scrollTop = 0;
    schedule();
  }

  function put(list) {
    for (const job of list) {
      const old = jobs.get(job.id);
      if (old && old._v !== undefined) job._v = old._v;
      jobs.set(job.id, job);
    }
    viewDirty = true;
    schedule();
  }

  async function loadAll() {
    buffering = [];
    try {
      const list = await api("/api/v1/jobs");
      jobs.clear();
      put(list);
      loaded = true;
    } catch (err) {
      notice(`The queue could not be read: ${err.message}`);
    } finally {
      const changes = buffering || [];
      buffering = null;
      for (const change of changes) apply(change);
    }
  }

  async function loadFirst() {
    try {
      const list = await api("/api/v1/jobs", { query: { limit: FIRST_PAGE } });
      if (!loaded) put(list);
      if (list.length < FIRST_PAGE && !loaded) {
        loaded = true;
        return;
      }
    } catch (err) {
      notice(`The queue could not be read: ${err.message}`);
    }
    await loadAll();
  }

  // New jobs the feed told of: read in one request (those submitted since the earliest).
  let newSince = null;
  let newTimer = null;
  function fetchNew(at) {
    newSince = newSince === null ? at : Math.min(newSince, at);
    if (newTimer) return;
    newTimer = setTimeout(async () => {
      const since = newSince - 1;
      newSince = null;
      newTimer = null;
      try {
        put(await api("/api/v1/jobs", { query: { since } }));
      } catch (err) {
        notice(`New jobs could not be read: ${err.message}`);
      }
    }, NEW_JOBS_DELAY_MS);
  }

  // Jobs that changed: read again, one small request each (the feed carries the raw state, not
  // the reason the queue shows nor whether the job is held); coalesced, a few at a time; a
  // burst larger than REREAD_MAX reads the whole queue once instead.
  const stale = new Set();
  let staleTimer = null;
  function reread(id) {
    stale.add(id);
    if (!staleTimer) staleTimer = setTimeout(flushStale, NEW_JOBS_DELAY_MS);
  }

  async function flushStale() {
    staleTimer = null;
    const ids = [...stale];
    stale.clear();
    if (ids.length > REREAD_MAX) { await loadAll(); return; }
    let next = 0;
    const worker = async () => {
      while (next < ids.length) await refreshJob(ids[next++]);
    };
    await Promise.all(Array.from({ length: Math.min(REREAD_PARALLEL, ids.length) }, worker));
  }

  async function refreshJob(id) {
    const asked = jobs.get(id);
    if (!asked) return;
    const version = asked._v;
    let fresh;
    try {
      fresh = await api(`/api/v1/jobs/${id}`);
    } catch {
      return; // gone (cleaned) or no longer visible: the feed says the rest
    }
    const known = jobs.get(id);
    if (!known) return; // ended meanwhile
    if (known._v !== version) { reread(id); return; } // a newer change came meanwhile
    fresh._v = version;
    jobs.set(id, fresh);
    viewDirty = true;
    schedule();
  }

  function apply(change) {
    if (buffering) { buffering.push(change); return; }
    const job = jobs.get(change.id);
    if (!job) {
      if (!isTerminal(change.state) && loaded) fetchNew(change.at);
      return;
    }
    if (job._v !== undefined && change.version <= job._v) return;
    job._v = change.version;
    job.state = change.state;
    job.display_state = null;
    if (change.state !== "PENDING") job.reason = change.reason;
    if (isTerminal(change.state) || change.state === "RUNNING") shifted = true;
    if (isTerminal(change.state)) {
      jobs.delete(change.id);
      if (job.owner === me.user) announce(`Job ${job.id} ${change.state.toLowerCase().replace("_", " ")}`);
    } else {
      reread(change.id);
    }
    viewDirty = true;
    schedule();
  }

  // Estimated starts move when jobs start or end, and a job listed before the scheduler's first
  // projection has none yet. Read again the waiting jobs on screen (only those: ~30 small
  // requests at most) a few seconds after such a change, and those still without an estimate
  // with a growing delay; nothing when nothing moved.
  let shifted = false;
  const tries = new Map(); // id -> reads made for a missing estimate
  const nextTry = new Map(); // id -> time of the next one
  async function refreshEstimates() {
    if (document.hidden || buffering) return;
    const now = Date.now();
    const targets = visible.filter((job) => {
      if (job.state !== "PENDING" || job.held) return false;
      if (shifted) return true;
      if (job.estimated_start_at) return false;
      const n = tries.get(job.id) || 0;
      return n < ESTIMATE_TRIES && now >= (nextTry.get(job.id) || 0);
    }).slice(0, REREAD_MAX);
    shifted = false;
    for (const job of targets) {
      const n = (tries.get(job.id) || 0) + 1;
      tries.set(job.id, n);
      nextTry.set(job.id, now + ESTIMATE_EVERY_MS * 2 ** n);
    }
    let next = 0;
    const worker = async () => { while (next < targets.length) await refreshJob(targets[next++].id); };
    await Promise.all(Array.from({ length: Math.min(REREAD_PARALLEL, targets.length) }, worker));
  }

  // --- drawing
  let frame = 0;
  function schedule() {
    if (!frame) frame = requestAnimationFrame(draw);
  }

  function draw() {
    frame = 0;
    if (viewDirty) rebuildView();
    const running = view.filter((j) => j.state === "RUNNING").length;
    const counted = loaded || view.length
      ? `${view.length.toLocaleString()} job${view.length === 1 ? "" : "s"} (${running.toLocaleString()} running, ${(view.length - running).toLocaleString()} waiting)`
      : "Loading…";
    if (count.textContent !== counted) count.textContent = counted; // a live region: only real changes
    grid.setAttribute("aria-rowcount", String(view.length + 1));
    spacer.style.height = `${view.length * ROW_H}px`;
    const height = body.clientHeight || 600;
    const first = Math.max(0, Math.floor(body.scrollTop / ROW_H) - OVERSCAN);
    const last = Math.min(view.length, Math.ceil((body.scrollTop + height) / ROW_H) + OVERSCAN);
    const now = Date.now();
    const fragment = [];
    for (let i = first; i < last; i++) fragment.push(row(view[i], i, now));
    visible = view.slice(first, last);
    rows.replaceChildren(...fragment);
    if (!view.length) {
      rows.replaceChildren(h("div.grid-empty", loaded
        ? (jobs.size ? "No job matches these filters." : "The queue is empty: no job is pending or running.")
        : "Loading the queue…"));
    }
    if (activeId !== null && !view.some((j) => j.id === activeId)) activeId = null;
    grid.setAttribute("aria-activedescendant", activeId !== null && rows.querySelector(`#job-row-${activeId}`) ? `job-row-${activeId}` : "");
    drawSelection();
    drawBulk();
  }

  function row(job, index, now) {
    const active = job.id === activeId;
    const verbs = mayAct(me, job) ? verbsFor(job) : [];
    const el = h(`div.grid-row${active ? ".active" : ""}`, {
      id: `job-row-${job.id}`, role: "row", "aria-rowindex": String(index + 2),
      "aria-selected": active ? "true" : "false",
      onclick: (e) => { if (!e.target.closest("button, a, input")) select(job.id); },
      ondblclick: () => { if (mayAct(me, job)) navigate(`/ui/jobs/${job.id}`); },
    },
      h("span.c-sel", { role: "gridcell" }, mayAct(me, job) ? h("input", {
        type: "checkbox", tabindex: "-1", checked: picked.has(job.id), "aria-label": `Tick job ${job.id}`,
        onchange: (e) => { if (e.target.checked) picked.add(job.id); else picked.delete(job.id); draw(); },
      }) : null),
      // Another user's job: its id is no link (its page would be "not yours to see").
      h("span.c-job", { role: "gridcell" }, mayAct(me, job)
        ? h("a", { href: `/ui/jobs/${job.id}`, tabindex: "-1" }, String(job.id))
        : h("span", { title: `${job.owner}'s job: its details are theirs and the admins'` }, String(job.id))),
      h("span.c-user", { role: "gridcell" }, job.owner),
      h("span.c-name", { role: "gridcell", title: job.name }, job.name),
      h("span.c-state", { role: "gridcell" }, statePill(job)),
      h("span.mono.c-gpus", { role: "gridcell" }, gpusAsked(job)),
      h("span.mono.c-time", { role: "gridcell" }, timeUsed(job, now)),
      h("span.mono.c-progress", { role: "gridcell" }, job.state === "RUNNING" ? progress.get(job.id) || "-" : ""),
      h("span.c-reason", { role: "gridcell", title: reasonText(job) }, reasonText(job)),
      h("span.c-est", { role: "gridcell", title: estimatedStartTitle(job) }, estimatedStart(job)),
      h("span.actions.c-actions", { role: "gridcell" }, verbs.map((verb) => h(`button.small${verb === "cancel" ? ".danger" : ""}`, {
        type: "button", tabindex: "-1", "aria-label": `${VERBS[verb].label} job ${job.id}`,
        onclick: () => run(verb, job),
      }, VERBS[verb].label))),
    );
    el.style.top = `${index * ROW_H}px`; // CSSOM, not a style attribute: allowed by a strict CSP
    return el;
  }

  function drawSelection() {
    const job = activeId !== null ? jobs.get(activeId) : null;
    if (!job) {
      clear(selection, h("span.hint", "Select a job: click it, or Tab to the list and use ↑/↓ or j/k; Enter opens it."));
      return;
    }
    const verbs = mayAct(me, job) ? verbsFor(job) : [];
    clear(selection,
      h("span", h("strong", `Job ${job.id}`), ` ${job.name} · ${job.owner} · `, statePill(job)),
      mayAct(me, job) ? h("a.button", { href: `/ui/jobs/${job.id}` }, "Open") : null,
      verbs.map((verb) => h(`button${verb === "cancel" ? ".danger" : ""}`, { type: "button", onclick: () => run(verb, job) },
        `${VERBS[verb].label} job ${job.id}`)));
  }

  function drawBulk() {
    for (const id of picked) if (!jobs.has(id)) picked.delete(id); // ended or gone
    const shownMine = view.filter((job) => mayAct(me, job));
    pickAll.checked = shownMine.length > 0 && shownMine.every((job) => picked.has(job.id));
    bulk.hidden = picked.size === 0;
    if (bulk.hidden) return;
    clear(bulk, h("span", h("strong", `${picked.size.toLocaleString()} job${picked.size === 1 ? "" : "s"} ticked`)),
      h("button.danger", { type: "button", onclick: cancelPicked }, `Cancel ${picked.size.toLocaleString()} ticked`),
      h("button", { type: "button", onclick: () => { picked.clear(); draw(); } }, "Untick all"));
  }

  // Every ticked job in one request (POST /api/v1/jobs/cancel, as `scancel` sends it).
  async function cancelPicked() {
    const ids = [...picked];
    const running = ids.filter((id) => (jobs.get(id) || {}).state === "RUNNING").length;
    if (!confirm(`Cancel ${ids.length} job${ids.length === 1 ? "" : "s"}${running ? ` (${running} running)` : ""}?`)) return;
    try {
      const done = await api("/api/v1/jobs/cancel", { method: "POST", body: { ids } });
      picked.clear();
      const said = [`${done.cancelled.length} cancelled`];
      if (done.stopping.length) said.push(`${done.stopping.length} stopping`);
      if (done.refused.length) said.push(`${done.refused.length} not cancelled (${done.refused[0].message})`);
      announce(said.join(", "));
      notice(`${said.join(", ")}.`, done.refused.length ? "error" : "ok");
    } catch (err) {
      notice(`Cancel ${ids.length} jobs: ${err.message}`);
    }
    draw();
  }

  // The running jobs on screen: their progress ("42%", "step 120"), read every few seconds.
  async function refreshProgress() {
    if (document.hidden || buffering) return;
    const targets = visible.filter((job) => job.state === "RUNNING" && mayAct(me, job)).slice(0, REREAD_MAX);
    let next = 0;
    const worker = async () => {
      while (next < targets.length) {
        const job = targets[next++];
        try {
          const p = await api(`/api/v1/jobs/${job.id}/progress`);
          const shown = p.fraction !== null && p.fraction !== undefined ? `${Math.floor(p.fraction * 100)}%`
            : p.step !== null && p.step !== undefined ? `step ${p.step}` : "-";
          if (progress.get(job.id) !== shown) { progress.set(job.id, shown); schedule(); }
        } catch {
          // no progress route, or the job ended meanwhile: the cell stays as it was
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(REREAD_PARALLEL, targets.length) }, worker));
  }

  async function run(verb, job) {
    if (verb === "cancel" && job.state === "RUNNING" && !confirm(`Cancel running job ${job.id} (${job.name})?`)) return;
    try {
      await act(verb, job);
      announce(`Job ${job.id} ${VERBS[verb].past}`);
      notice(`Job ${job.id} ${VERBS[verb].past}.`, "ok");
    } catch (err) {
      notice(`${VERBS[verb].label} job ${job.id}: ${err.message}`);
    }
  }

  function select(id, scroll = false) {
    activeId = id;
    const index = view.findIndex((j) => j.id === id);
    if (scroll && index >= 0) {
      const top = index * ROW_H;
      if (top < body.scrollTop) body.scrollTop = top;
      else if (top + ROW_H > body.scrollTop + body.clientHeight) body.scrollTop = top + ROW_H - body.clientHeight;
    }
    draw();
  }

  function onKey(event) {
    if (!view.length) return;
    const index = activeId === null ? -1 : view.findIndex((j) => j.id === activeId);
    const page = Math.max(1, Math.floor(body.clientHeight / ROW_H) - 1);
    let next = null;
    switch (event.key) {
      case "ArrowDown": case "j": next = Math.min(view.length - 1, index + 1); break;
      case "ArrowUp": case "k": next = Math.max(0, index < 0 ? 0 : index - 1); break;
      case "PageDown": next = Math.min(view.length - 1, index + page); break;
      case "PageUp": next = Math.max(0, index - page); break;
      case "Home": next = 0; break;
      case "End": next = view.length - 1; break;
      case "Enter":
        if (activeId !== null && mayAct(me, jobs.get(activeId))) { event.preventDefault(); navigate(`/ui/jobs/${activeId}`); }
        return;
      default: return;
    }
    event.preventDefault();
    select(view[next].id, true);
  }

  // --- live
  const stop = stream("/api/v1/jobs/changes", { job: apply }, {
    onresync: () => loadAll(),
    onstate: (on) => {
      live.classList.toggle("on", on);
      live.textContent = on ? "live" : "reconnecting…";
    },
    onmissing: () => { live.textContent = "not live (no change feed)"; },
  });
  const ticker = setInterval(() => { if (!document.hidden) schedule(); }, 1000);
  const estimator = setInterval(refreshEstimates, ESTIMATE_EVERY_MS);
  const progressReader = setInterval(refreshProgress, PROGRESS_EVERY_MS);
  setTimeout(refreshProgress, 500); // the first rows' progress soon after they are drawn
  const onResize = () => schedule();
  window.addEventListener("resize", onResize);
  loadFirst();

  return () => {
    stop();
    clearInterval(ticker);
    clearInterval(estimator);
    clearInterval(progressReader);
    clearTimeout(newTimer);
    clearTimeout(staleTimer);
    window.removeEventListener("resize", onResize);
    if (frame) cancelAnimationFrame(frame);
  };
}
