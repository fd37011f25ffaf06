"""What webhooks cost the journal, and how fast a delivery reaches a receiver.

In process, the server's own objects (`NotifyService` and its `WebhookSender` over a SQLite
store, the standard library's HTTP poster, a `ThreadingHTTPServer` receiver on loopback):
- `observer_us`: the in-order observer's time per committed change (it runs under the
  journal's lock): with no webhook anywhere (`none_set`), and with a default set so that every
  job's begin is queued (`queued`); mean over `--changes` calls;
- `delivery_ms`: from the observer's call to the receiver's reading the POST, with the
  sender thread and its workers running (each delivery stored, signed, sent), p50 and p99
  over `--deliveries` jobs' begins, sent one every 5 ms.

    .venv/bin/python bench/webhooks.py --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from machine import with_machine

from gpuyard.adapters.store.sql import SqlJobStore, sqlite_url
from gpuyard.adapters.webhook import HttpPoster
from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.principal import Principal
from gpuyard.domain.states import JobState
from gpuyard.domain.webhooks import UrlPolicy
from gpuyard.services.jobs.journal import JobChange
from gpuyard.services.workflows.notify import make_notify


def jobs(n: int, start: int = 1) -> list[tuple[Job, Job]]:
    out = []
    for i in range(start, start + n):
        spec = JobSpec(argv=("true",), name=f"j{i}", workdir="/")
        pending = Job(i, spec, "ada", JobState.PENDING, submitted_at=time.time())
        out.append((pending, pending.transition(JobState.RUNNING, started_at=time.time())))
    return out


def observer_us(store: SqlJobStore, url: str, changes: int) -> dict[str, float]:
    policy = UrlPolicy.parse("loopback")
    figures = {}
    for label, set_default in (("none_set", False), ("queued", True)):
        service = make_notify(store, HttpPoster(policy), policy, queue_size=changes + 1)
        if set_default:
            service.set(Principal("ada"), [url], ["begin"])
        pairs = [JobChange(p, r, 0.0) for p, r in jobs(changes)]
        began = time.perf_counter()
        for change in pairs:
            service(change)
        figures[label] = (time.perf_counter() - began) / changes * 1e6
        service.clear(Principal("ada"))
    return figures


def delivery_ms(store: SqlJobStore, deliveries: int) -> dict[str, float]:
    arrived: dict[int, float] = {}
    done = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            arrived[body["job"]["id"]] = time.perf_counter()
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
            if len(arrived) >= deliveries:
                done.set()

        def log_message(self, *args: object) -> None:
            pass

    receiver = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{receiver.server_address[1]}/hook"
    policy = UrlPolicy.parse("loopback")
    service = make_notify(store, HttpPoster(policy), policy)
    service.set(Principal("ada"), [url], ["begin"])
    service.sender.start()
    sent: dict[int, float] = {}
    try:
        for pending, running in jobs(deliveries, start=10_000_000):
            sent[running.id] = time.perf_counter()
            service(JobChange(pending, running, time.time()))
            time.sleep(0.005)
        done.wait(120)
    finally:
        service.sender.stop()
        receiver.shutdown()
    waits = sorted((arrived[i] - sent[i]) * 1000 for i in sent if i in arrived)
    return {
        "p50": statistics.median(waits),
        "p99": waits[min(len(waits) - 1, int(len(waits) * 0.99))],
        "received": len(waits),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--deliveries", type=int, default=300)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = SqlJobStore(sqlite_url(Path(tmp) / "gpuyard.db"))
        try:
            result: dict[str, Any] = {
                "observer_us": observer_us(store, "http://127.0.0.1:9/hook", args.changes),
                "delivery_ms": delivery_ms(store, args.deliveries),
            }
        finally:
            store.close()
    if args.json:
        print(json.dumps(with_machine(result), indent=2))
    else:
        obs, dl = result["observer_us"], result["delivery_ms"]
        print(f"observer per change: {obs['none_set']:.2f} us (no webhook set), "
              f"{obs['queued']:.2f} us (queued)")  # fmt: skip
        print(f"observer call to receiver: p50 {dl['p50']:.1f} ms, p99 {dl['p99']:.1f} ms "
              f"({dl['received']} delivered)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
