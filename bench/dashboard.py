"""The web dashboard's figures (issue 14), in a real headless Chromium (Debian's, driven by
playwright), against a real `gpuyard server` with 10,000 jobs in its queue:

(a) time to first render of the queue page: from navigation start (the browser's
    `performance.timeOrigin`) to the first job rows in the DOM and painted (the next animation
    frame after they appear), read with `performance.now()` by a MutationObserver the page
    gets before its own scripts run; over `--loads` fresh loads (a new tab each, same session).
(b) SSE latency: a job submitted (then cancelled) through the API while the queue page is open;
    from just before the request is sent to when the page's EventSource receives the change
    (`Date.now()` in the page, `time.time()` here: one machine, one clock); and to when the
    job's row shows the new state. p50/p99 over `--changes` submits and as many cancels.
(c) server CPU with `--pages` dashboard pages open (half the queue, half the GPUs board, each
    with its live streams, each in a browser context of its own) over `--duration-s` seconds:
    utime+stime of the server process from /proc/<pid>/stat, as % of one core; next to the
    same server with no page open; each quiet, then with `--churn-per-s` job changes a second.

The server: two GPUs from the project's fake NVML (telemetry every second, as on a real box)
when gcc is there, else two declared ones; both held by `sleep` jobs, so the 10,000 submitted
1-GPU jobs all stay PENDING. Prints one JSON line with `--json`.

    .venv/bin/python bench/dashboard.py --json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from machine import with_machine  # noqa: E402
from submit import Api, ms, percentile, proc_cpu_s  # noqa: E402
from tests.web.rig import (  # noqa: E402
    CHROMIUM,
    CHROMIUM_ARGS,
    VIEWPORT,
    Dashboard,
    login,
    shared_place,
    start_dashboard,
    stop_dashboard,
)

# A job's row in the queue page (pages/queue.js): the selector the first render waits for.
ROW = '[id^="job-row-"]'

# Runs in every page before its own scripts: records when the first job rows appear (and the
# frame after, when they are painted) and every event the page's EventSources receive.
PROBE = """
(() => {
  const probe = (window.__probe = { rowsAt: null, paintedAt: null, events: [] });
  const seen = () => {
    if (probe.rowsAt !== null || !document.querySelector(__ROW__)) return false;
    probe.rowsAt = performance.now();
    requestAnimationFrame(() => { probe.paintedAt = performance.now(); });
    return true;
  };
  new MutationObserver((_, observer) => { if (seen()) observer.disconnect(); })
    .observe(document, { childList: true, subtree: true });
  // A filtered queue (a few rows): when each job's row first shows, and when it goes.
  probe.rowShown = {};
  probe.rowGone = {};
  if (new URLSearchParams(location.search).has("name")) {
    new MutationObserver(() => {
      const now = Date.now();
      const here = new Set([...document.querySelectorAll(__ROW__)].map((r) => r.id.slice(8)));
      for (const id of here) if (!(id in probe.rowShown)) probe.rowShown[id] = now;
      for (const id in probe.rowShown) {
        if (!here.has(id) && !(id in probe.rowGone)) probe.rowGone[id] = now;
      }
    }).observe(document, { childList: true, subtree: true });
  }
  const Native = window.EventSource;
  window.EventSource = class extends Native {
    constructor(url, init) {
      super(url, init);
      const stream = String(url);
      const note = (event) => {
        let data = null;
        try { data = JSON.parse(event.data); } catch { data = event.data; }
        probe.events.push({ at: Date.now(), stream, type: event.type, data });
      };
      for (const type of ["job", "resync"]) this.addEventListener(type, note);
    }
  };
})();
""".replace("__ROW__", json.dumps(ROW))


# -- the server ------------------------------------------------------------------------------
def fill(dash: Dashboard, pending: int, clients: int) -> list[int]:
    """Hold both GPUs with `sleep` jobs, then queue `pending` 1-GPU jobs from `clients`
    threads (each on its own keep-alive connection): they all stay PENDING."""
    api = Api(dash.url, dash.admin_token)
    try:
        workdir = str(dash.place)
        holders = [api.submit(["sleep", "3600"], 1, workdir)["id"] for _ in range(2)]
        deadline = time.monotonic() + 60
        while any(api.json("GET", f"/api/v1/jobs/{i}")["state"] != "RUNNING" for i in holders):
            if time.monotonic() > deadline:
                raise TimeoutError("the GPU-holding jobs did not start")
            time.sleep(0.05)
    finally:
        api.close()
    ids: list[int] = []
    lock = threading.Lock()

    def worker(count: int) -> None:
        api = Api(dash.url, dash.admin_token)
        try:
            for _ in range(count):
                body = {"command": ["true"], "gpus": 1, "workdir": workdir, "time_limit": "1d"}
                job_id = api.json("POST", "/api/v1/jobs", body)["id"]
                with lock:
                    ids.append(job_id)
        finally:
            api.close()

    shares = [pending // clients + (i < pending % clients) for i in range(clients)]
    threads = [threading.Thread(target=worker, args=(n,)) for n in shares]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return ids


# -- the browser -----------------------------------------------------------------------------
@contextmanager
def browser_context(dash: Dashboard) -> Iterator[Any]:
    """A headless Chromium context logged in with the server's own token (an admin: the queue
    page lists all 10,000 jobs), the probe installed in every page."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                     args=CHROMIUM_ARGS)  # fmt: skip
        try:
            page = login(browser, dash.url, dash.browser_admin_token)
            context = page.context
            context.add_init_script(PROBE)
            page.close()
            yield context
        finally:
            browser.close()


def painted_probe(page: Any, timeout_s: float = 60.0) -> dict[str, Any]:
    """The page's probe once its first rows are painted. Polled from here: the page's CSP
    (no eval) refuses playwright's wait_for_function."""
    deadline = time.monotonic() + timeout_s
    while True:
        probe: dict[str, Any] | None = page.evaluate("window.__probe")
        if probe and probe["paintedAt"] is not None:
            return probe
        if time.monotonic() > deadline:
            raise TimeoutError("the queue page showed no job row")
        time.sleep(0.02)


def first_render(context: Any, loads: int) -> dict[str, Any]:
    """Fresh loads of the queue page: navigation start to rows in the DOM, and to painted."""
    in_dom, painted = [], []
    for _ in range(loads):
        page = context.new_page()
        page.goto("/ui/")
        probe = painted_probe(page)
        rows = page.locator(ROW).count()
        in_dom.append(probe["rowsAt"] / 1000.0)
        painted.append(probe["paintedAt"] / 1000.0)
        page.close()
    return {
        "loads": loads,
        "rows_rendered": rows,
        "rows_in_dom_ms": {"p50": ms(percentile(in_dom, 50)), "max": ms(max(in_dom))},
        "first_render_ms": {"p50": ms(percentile(painted, 50)), "max": ms(max(painted))},
        "target_ms": 1000,
    }


def _stats(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "p50": None, "p99": None, "max": None}
    return {"n": len(values), "p50": ms(percentile(values, 50)),
            "p99": ms(percentile(values, 99)), "max": ms(max(values))}  # fmt: skip


def _until_live(page: Any, timeout_s: float = 30.0) -> None:
    """Until the page's change feed is connected (its live dot says so)."""
    page.locator(".live-dot.on").wait_for(timeout=timeout_s * 1000)


def sse_latency(dash: Dashboard, context: Any, changes: int, gap_s: float) -> dict[str, Any]:
    """Submit (and then cancel) jobs with two queue pages open, the whole queue and one
    filtered by the jobs' name: when each page's EventSource receives each change, and when
    the filtered page shows the job's row and drops it (its virtual list draws only what is
    on screen, so the whole queue's newest rows are below the fold)."""
    whole = context.new_page()
    whole.goto("/ui/")
    painted_probe(whole)
    filtered = context.new_page()
    filtered.goto("/ui/?name=sse-probe")
    for page in (whole, filtered):
        _until_live(page)
    api = Api(dash.url, dash.admin_token)
    sent: dict[tuple[int, str], float] = {}
    try:
        time.sleep(1.0)  # both pages have read the whole queue
        workdir = str(dash.place)
        body = {"command": ["sleep", "3600"], "gpus": 1, "workdir": workdir, "name": "sse-probe"}
        for _ in range(changes):
            t0 = time.time()
            job_id = api.json("POST", "/api/v1/jobs", body)["id"]
            sent[(job_id, "PENDING")] = t0
            time.sleep(gap_s)
            t0 = time.time()
            api.json("POST", f"/api/v1/jobs/{job_id}/cancel")
            sent[(job_id, "CANCELLED")] = t0
            time.sleep(gap_s)
        time.sleep(2.0)
        probes = [page.evaluate("window.__probe") for page in (whole, filtered)]
    finally:
        api.close()
        whole.close()
        filtered.close()
    received: list[float] = []
    for probe in probes:
        first: dict[tuple[int, str], float] = {}
        for event in probe["events"]:
            data = event["data"]
            if event["type"] == "job" and isinstance(data, dict):
                first.setdefault((int(data["id"]), str(data["state"])), event["at"] / 1000.0)
        received += [first[k] - t for k, t in sent.items() if k in first]
    shown, gone = probes[1]["rowShown"], probes[1]["rowGone"]
    row_in = [shown[str(k[0])] / 1000.0 - t for k, t in sent.items()
              if k[1] == "PENDING" and str(k[0]) in shown]  # fmt: skip
    row_out = [gone[str(k[0])] / 1000.0 - t for k, t in sent.items()
               if k[1] == "CANCELLED" and str(k[0]) in gone]  # fmt: skip
    return {
        "changes": len(sent),
        "event_received_ms": _stats(received),  # both pages: 2 per change
        "row_shown_ms": _stats(row_in),
        "row_gone_ms": _stats(row_out),
        "target_p99_ms": 1000,
    }


def _churn(dash: Dashboard, per_s: float, stop: threading.Event) -> None:
    """Until `stop`: a job submitted and then cancelled, `per_s` changes a second in all."""
    api = Api(dash.url, dash.admin_token)
    body = {"command": ["sleep", "3600"], "gpus": 1, "workdir": str(dash.place), "name": "churn"}
    try:
        while not stop.wait(1.0 / per_s):
            job_id = api.json("POST", "/api/v1/jobs", body)["id"]
            if stop.wait(1.0 / per_s):
                break
            api.json("POST", f"/api/v1/jobs/{job_id}/cancel")
    finally:
        api.close()


def server_cpu(
    dash: Dashboard, context: Any, pages: int, duration_s: float, churn_per_s: float
) -> dict[str, Any]:
    """Server CPU, % of one core, over `duration_s`: with no page, then with `pages` open;
    each quiet (only the GPU stream ticks), then with `churn_per_s` job changes a second."""
    pid = dash.server.proc.pid if dash.server.proc else 0

    def measure(churn: bool) -> float:
        stop = threading.Event()
        mover = threading.Thread(target=_churn, args=(dash, churn_per_s, stop))
        if churn:
            mover.start()
        t0, c0 = time.monotonic(), proc_cpu_s(pid)
        time.sleep(duration_s)
        pct = round(100.0 * (proc_cpu_s(pid) - c0) / (time.monotonic() - t0), 2)
        stop.set()
        if churn:
            mover.join()
        return pct

    idle, idle_churn = measure(False), measure(True)
    opened = []
    t0 = time.monotonic()
    contexts = []
    for i in range(pages):  # one after the other: each reads the whole queue once
        # A context each (a browser profile: its own connections; one profile keeps at most
        # 6 to a server over HTTP/1.1, fewer than 20 pages' streams), the same session.
        own = context.browser.new_context(storage_state=context.storage_state(),
                                          base_url=dash.url, viewport=VIEWPORT)  # fmt: skip
        own.add_init_script(PROBE)
        contexts.append(own)
        page = own.new_page()
        page.set_default_timeout(120_000)
        if i % 2 == 0:
            page.goto("/ui/")
            painted_probe(page, timeout_s=120)
        else:
            page.goto("/ui/gpus")
        _until_live(page, timeout_s=120)
        opened.append(page)
    opening_s = time.monotonic() - t0
    time.sleep(5.0)  # every page has its whole queue, its streams open
    busy, busy_churn = measure(False), measure(True)
    for own in contexts:
        own.close()
    return {"pages": pages, "duration_s": duration_s, "churn_changes_per_s": churn_per_s,
            "no_page_pct": idle, "with_pages_pct": busy, "no_page_churn_pct": idle_churn,
            "with_pages_churn_pct": busy_churn, "opening_all_s": round(opening_s, 1),
            "target_pct": 10}  # fmt: skip


def run(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {"bench": "dashboard",
                              "pending_jobs": args.jobs}  # fmt: skip
    with shared_place("gydash-bench-") as place:
        dash = start_dashboard(place, {}, telemetry_s=1.0)
        try:
            t0 = time.monotonic()
            fill(dash, args.jobs, args.clients)
            result["fill_s"] = round(time.monotonic() - t0, 1)
            result["nvml"] = dash.nvml_state is not None
            with browser_context(dash) as context:
                result["first_render"] = first_render(context, args.loads)
                print(f"first render: {result['first_render']}", file=sys.stderr)
                result["sse"] = sse_latency(dash, context, args.changes, args.gap_s)
                print(f"SSE: {result['sse']}", file=sys.stderr)
                result["server_cpu"] = server_cpu(
                    dash, context, args.pages, args.duration_s, args.churn_per_s
                )
        finally:
            stop_dashboard(dash)
    return result


def human(r: dict[str, Any]) -> str:
    fr, sse, cpu = r["first_render"], r["sse"], r["server_cpu"]
    return "\n".join([
        f"queue page, {r['pending_jobs']} jobs: first render p50 {fr['first_render_ms']['p50']}"
        f" ms, max {fr['first_render_ms']['max']} ms ({fr['loads']} loads, target 1000 ms)",
        f"SSE latency: received p50 {sse['event_received_ms']['p50']} ms, p99"
        f" {sse['event_received_ms']['p99']} ms ({sse['event_received_ms']['n']} of"
        f" {2 * sse['changes']}; target p99 1000 ms); row shown p99"
        f" {sse['row_shown_ms']['p99']} ms, gone p99 {sse['row_gone_ms']['p99']} ms",
        f"server CPU: {cpu['with_pages_pct']}% of a core with {cpu['pages']} pages open,"
        f" {cpu['no_page_pct']}% with none; with {cpu['churn_changes_per_s']:g} job changes/s"
        f" {cpu['with_pages_churn_pct']}% and {cpu['no_page_churn_pct']}%"
        f" ({cpu['duration_s']:g} s each; target 10%)",
    ])  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000, help="pending jobs in the queue")
    parser.add_argument("--clients", type=int, default=4, help="threads that submit them")
    parser.add_argument("--loads", type=int, default=5, help="fresh loads of the queue page")
    parser.add_argument("--changes", type=int, default=50, help="jobs submitted then cancelled")
    parser.add_argument("--gap-s", type=float, default=0.2, help="between two changes")
    parser.add_argument("--pages", type=int, default=20, help="dashboard pages open for (c)")
    parser.add_argument("--duration-s", type=float, default=60.0, help="CPU measuring time")
    parser.add_argument("--churn-per-s", type=float, default=2.0,
                        help="job changes a second in (c)'s second half")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="one JSON line")
    args = parser.parse_args()
    if not os.access(CHROMIUM, os.X_OK):
        print(f"bench/dashboard.py: no {CHROMIUM}: apt-get install chromium", file=sys.stderr)
        return 1
    result = run(args)
    print(json.dumps(with_machine(result)) if args.json else human(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
