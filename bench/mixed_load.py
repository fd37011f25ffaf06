"""Mixed load from many clients (issue 27): per-verb latency while 50 clients use the server at
once, as the CLI does, against a long history or a deep queue.

Starts its own `gpuyard server` (bench/submit.py's `LocalServer`: free loopback port, temporary
state dir, `--gpus 8`) over a database already holding `--finished` finished jobs (20,000;
built as bench/history.py builds its million: rows inserted straight into SQLite before the
server starts). Then, before anything is measured: a few jobs that print 2,000 lines run and
end (what `logs` reads), and the 8 GPUs are filled with `sleep 3600` jobs, so every job the
clients submit stays pending (the bench measures the API and the durable write, not process
starts). Then `--clients` threads, each with its own keep-alive connection, send for
`--seconds` the requests the CLI sends (src/gpuyard/cli/commands.py), chosen at random:

- submit 30 %: `POST /api/v1/jobs` with an Idempotency-Key (`gpuyard submit --gpus 1 -- true`);
- queue 20 %: `GET /api/v1/jobs` (`gpuyard queue`: every pending and running job);
- show 20 %: `GET /api/v1/jobs/{id}` of a random job, finished or this client's (`gpuyard show`);
- logs 15 %: `GET /api/v1/jobs/{id}/log?offset=0` of a job that printed (`gpuyard logs`);
- cancel 10 %: `POST /api/v1/jobs/cancel` of every job this client queued since its last cancel
  (`gpuyard cancel ID...`, one request), so the queue holds ~3 pending jobs per client however
  fast the server is (a queue that grew with the server's speed would make a faster server
  look slower: `queue` lists every pending job);
- queue_all 5 %: `GET /api/v1/jobs?all=true&limit=200` (`gpuyard queue --all`: the newest page
  of history; before issue 27's fix the CLI sent no limit and the server answered 10,000 jobs:
  `--history-page 0` sends that).

Each client sends its next request as soon as the last is answered (closed loop; `--think-ms`
pauses between). Latency is send to the last byte of the answer. An error is any answer >= 400
or a failed connection. Printed per verb: count, p50, p99, max, errors; and requests/s in all.

With `--pending N` (the issue's second target): no history is loaded; N jobs of 1-8 GPUs that
cannot start (the GPUs are held) are queued first (bench/api_latency.py's `fill`), so every
submit wakes a scheduling pass over N jobs and every `show` of a pending job asks for a
projection; then `--seconds` (40 in this mode) of mixed reads and submits in which `queue` is
the job list's first page (`GET /api/v1/jobs?limit=50`, a dashboard's or `queue --limit 50`'s)
and `queue_all` the first page of history (`?all=true&limit=50`); `list_whole` (a few
requests: `gpuyard queue` of all N jobs) is reported beside them. The figure is the max.

`--py-spy FILE` records the server with py-spy (raw folded stacks, `--seconds` long) during the
measured window, to see where the time goes.

    .venv/bin/python bench/mixed_load.py [--json] [--seconds 60] [--clients 50]
    .venv/bin/python bench/mixed_load.py --pending 10000 [--json]     # 40 s by default
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from api_latency import fill, occupy
from history import build_database
from machine import with_machine
from submit import LocalServer, ms, percentile

from gpuyard.cli.commands import HISTORY_PAGE  # what `queue --all` asks for

GPUS = 8
MIX = {"submit": 30, "queue": 20, "show": 20, "logs": 15, "cancel": 10, "queue_all": 5}
PENDING_MIX = {"submit": 30, "show": 30, "logs": 15, "queue": 15, "queue_all": 10}
LOG_JOBS = 8  # jobs that print, for `logs` to read
LOG_LINES = 2000
WHOLE_LIST_EVERY_S = 5.0  # --pending: one listing of the whole queue this often


class Connection:
    """One client's keep-alive HTTP/1.1 connection, as the CLI's `Client` talks to the server."""

    def __init__(self, url: str, token: str, timeout_s: float = 120.0) -> None:
        parsed = urllib.parse.urlsplit(url)
        self._address = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        self._timeout_s = timeout_s
        self._headers = {"Authorization": f"Bearer {token}", "Accept": "application/json",
                         "Content-Type": "application/json"}  # fmt: skip
        self._conn: http.client.HTTPConnection | None = None

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        payload = None if body is None else json.dumps(body).encode()
        for attempt in (0, 1):
            if self._conn is None:
                self._conn = http.client.HTTPConnection(*self._address, timeout=self._timeout_s)
                self._conn.connect()
                assert self._conn.sock is not None
                self._conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                self._conn.request(method, path, payload, {**self._headers, **(headers or {})})
                answer = self._conn.getresponse()
                return answer.status, answer.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.close()  # an idle keep-alive connection the server closed: once more
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


@dataclass
class Tally:
    """One verb's latencies (s) and errors, across clients (each client appends its own)."""

    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    first_errors: list[str] = field(default_factory=list)


@dataclass
class World:
    """What the clients pick their targets from."""

    workdir: str
    show_ids: list[int]
    log_ids: list[int]
    first_page: bool  # --pending: `queue` and `queue_all` ask for the first page only
    history_page: int  # the limit `queue_all` sends (0: none, the CLI before issue 27)


class Client:
    """One user: its connection, its own pending jobs (what its `cancel` cancels)."""

    def __init__(self, conn: Connection, world: World, seed: int) -> None:
        self.conn, self.world, self.rng = conn, world, random.Random(seed)
        self.mine: list[int] = []

    def send(self, verb: str) -> tuple[int, bytes]:
        world, rng = self.world, self.rng
        if verb == "submit":
            body = {"command": ["true"], "gpus": 1, "workdir": world.workdir}
            status, data = self.conn.request(
                "POST", "/api/v1/jobs", body, {"Idempotency-Key": str(uuid.uuid4())}
            )
            if status in (200, 201):
                self.mine.append(int(json.loads(data)["id"]))
            return status, data
        if verb == "queue":
            return self.conn.request("GET", "/api/v1/jobs" + ("?limit=50" * world.first_page))
        if verb == "queue_all":
            limit = 50 if world.first_page else world.history_page
            page = f"&limit={limit}" if limit else ""
            return self.conn.request("GET", "/api/v1/jobs?all=true" + page)
        if verb == "show":
            ids = world.show_ids
            job_id = rng.choice(self.mine) if self.mine and rng.random() < 0.2 else rng.choice(ids)
            return self.conn.request("GET", f"/api/v1/jobs/{job_id}")
        if verb == "logs":
            job_id = rng.choice(world.log_ids)
            return self.conn.request("GET", f"/api/v1/jobs/{job_id}/log?offset=0")
        if verb == "cancel":
            ids, self.mine = self.mine, []
            return self.conn.request(
                "POST", "/api/v1/jobs/cancel", {"ids": ids, "whole_arrays": True}
            )
        if verb == "list_whole":
            return self.conn.request("GET", "/api/v1/jobs")
        raise ValueError(verb)


def run_clients(
    server: LocalServer, world: World, mix: dict[str, int], args: argparse.Namespace
) -> tuple[dict[str, Tally], float]:
    """`args.clients` closed-loop clients for `args.seconds`; per-verb tallies, seconds run."""
    verbs, weights = list(mix), list(mix.values())
    tallies = {verb: Tally() for verb in [*verbs, *(["list_whole"] * world.first_page)]}
    lock = threading.Lock()
    stop = threading.Event()
    ready = threading.Barrier(args.clients + 1 + world.first_page)  # + the whole-queue lister

    def record(verb: str, began: float, outcome: str | None) -> None:
        took = time.perf_counter() - began
        with lock:
            tally = tallies[verb]
            tally.latencies.append(took)
            if outcome is not None:
                tally.errors += 1
                if len(tally.first_errors) < 3:
                    tally.first_errors.append(outcome)

    def one(client: Client, verb: str) -> None:
        began = time.perf_counter()
        try:
            status, data = client.send(verb)
            outcome = None if status < 400 else f"HTTP {status}: {data[:160]!r}"
        except OSError as exc:
            client.conn.close()
            outcome = f"{type(exc).__name__}: {exc}"
        record(verb, began, outcome)

    def loop(seed: int) -> None:
        client = Client(Connection(server.url, server.token), world, seed)
        try:
            for _ in range(2):  # something to cancel from the start (not measured)
                client.send("submit")
            ready.wait()
            while not stop.is_set():
                verb = client.rng.choices(verbs, weights)[0]
                if verb == "cancel" and not client.mine:
                    verb = "submit"
                one(client, verb)
                if args.think_ms:
                    stop.wait(args.think_ms / 1000)
        finally:
            client.conn.close()

    def whole_lists() -> None:  # --pending: now and then `gpuyard queue` of the whole queue
        client = Client(Connection(server.url, server.token), world, 0)
        try:
            ready.wait()
            while not stop.wait(WHOLE_LIST_EVERY_S):
                one(client, "list_whole")
        finally:
            client.conn.close()

    threads = [threading.Thread(target=loop, args=(i + 1,)) for i in range(args.clients)]
    if world.first_page:
        threads.append(threading.Thread(target=whole_lists))
    for thread in threads:
        thread.start()
    ready.wait()
    began = time.perf_counter()
    spy = start_py_spy(server.pid, args) if args.py_spy else None
    stop.wait(args.seconds)
    stop.set()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    if spy is not None:
        spy.wait(timeout=60)
    return tallies, elapsed


def start_py_spy(pid: int, args: argparse.Namespace) -> subprocess.Popen[bytes]:
    """py-spy (beside this interpreter, else on PATH) recording the server for the run."""
    beside = Path(sys.executable).parent / "py-spy"
    exe = str(beside) if beside.exists() else shutil.which("py-spy") or "py-spy"
    argv = [exe, "record", "-p", str(pid), "-f", "raw", "-o", args.py_spy,
            "-d", str(max(1, int(args.seconds))), "--nonblocking"]  # fmt: skip
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def summary(tallies: dict[str, Tally], elapsed: float) -> dict[str, Any]:
    verbs: dict[str, Any] = {}
    for verb, tally in tallies.items():
        values = tally.latencies
        verbs[verb] = {
            "n": len(values),
            "p50_ms": ms(percentile(values, 50)) if values else None,
            "p99_ms": ms(percentile(values, 99)) if values else None,
            "max_ms": ms(max(values)) if values else None,
            "errors": tally.errors,
            **({"first_errors": tally.first_errors} if tally.first_errors else {}),
        }
    total = sum(len(t.latencies) for t in tallies.values())
    return {"verbs": verbs, "requests": total, "requests_per_s": round(total / elapsed, 1),
            "errors": sum(t.errors for t in tallies.values()),
            "seconds": round(elapsed, 1)}  # fmt: skip


def print_logs_jobs(server: LocalServer) -> list[int]:
    """LOG_JOBS jobs that print LOG_LINES lines each, run to their end: what `logs` reads."""
    conn = Connection(server.url, server.token)
    try:
        ids = []
        for _ in range(LOG_JOBS):
            body = {"command": ["seq", "1", str(LOG_LINES)], "gpus": 1,
                    "workdir": str(server.workdir)}  # fmt: skip
            status, data = conn.request("POST", "/api/v1/jobs", body)
            if status != 201:
                raise RuntimeError(f"submit answered {status}: {data[:200]!r}")
            ids.append(int(json.loads(data)["id"]))
        deadline = time.monotonic() + 120
        for job_id in ids:
            while json.loads(conn.request("GET", f"/api/v1/jobs/{job_id}")[1])["state"] in (
                "PENDING", "RUNNING",
            ):  # fmt: skip
                if time.monotonic() > deadline:
                    raise TimeoutError(f"job {job_id} (seq) did not end within 120 s")
                time.sleep(0.05)
        return ids
    finally:
        conn.close()


def loaded_server(args: argparse.Namespace) -> LocalServer:
    """The server, over a database of `args.finished` finished jobs (none with --pending)."""
    server = LocalServer(GPUS, cpus=64, keep=args.keep)
    if not args.pending and args.finished:
        build_database(server.state_dir / "gpuyard.db", args.finished)
    return server


def measure(server: LocalServer, args: argparse.Namespace, result: dict[str, Any]) -> None:
    t0 = time.perf_counter()
    log_ids = print_logs_jobs(server)
    occupy(server)
    pending_ids: list[int] = []
    if args.pending:
        pending_ids = fill(server, args.pending, clients=4)
    result["setup_s"] = round(time.perf_counter() - t0, 1)
    print(f"server pid {server.pid}, {server.url}; measuring {args.seconds:g} s",
          file=sys.stderr)  # fmt: skip
    show_ids = pending_ids or list(range(1, args.finished + 1)) or log_ids
    world = World(str(server.workdir), show_ids, log_ids, first_page=bool(args.pending),
                  history_page=args.history_page)  # fmt: skip
    tallies, elapsed = run_clients(server, world, PENDING_MIX if args.pending else MIX, args)
    result.update(summary(tallies, elapsed))


def print_human(result: dict[str, Any]) -> None:
    print(f"{'verb':12s} {'count':>7s} {'p50 ms':>9s} {'p99 ms':>9s} {'max ms':>9s} {'errors':>7s}")
    for verb, row in result["verbs"].items():
        print(f"{verb:12s} {row['n']:7d} {row['p50_ms'] or 0:9.1f} {row['p99_ms'] or 0:9.1f} "
              f"{row['max_ms'] or 0:9.1f} {row['errors']:7d}")  # fmt: skip
        for message in row.get("first_errors", []):
            print(f"    {message}")
    print(f"{result['requests']} requests in {result['seconds']} s: "
          f"{result['requests_per_s']} requests/s, {result['errors']} errors; "
          f"load average at the end {result['loadavg_1m_at_end']}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON line")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, help="measured time [60; 40 with --pending]")
    parser.add_argument("--finished", type=int, default=20_000, help="finished jobs loaded")
    parser.add_argument("--pending", type=int, default=0, help="queue N jobs instead (target 2)")
    parser.add_argument("--history-page", type=int, default=HISTORY_PAGE,
                        help="the limit queue_all sends [the CLI's]; 0: none (before)")  # fmt: skip
    parser.add_argument("--think-ms", type=float, default=0.0, help="pause between requests")
    parser.add_argument("--py-spy", metavar="FILE", help="record the server into FILE (raw)")
    parser.add_argument("--keep", action="store_true", help="keep the state dir and server log")
    args = parser.parse_args()
    if args.seconds is None:
        args.seconds = 40.0 if args.pending else 60.0
    result: dict[str, Any] = {
        "bench": "mixed_load", "clients": args.clients, "gpus": GPUS,
        "finished": 0 if args.pending else args.finished, "pending": args.pending,
        "mix": PENDING_MIX if args.pending else MIX, "history_page": args.history_page,
    }  # fmt: skip
    with loaded_server(args) as server:
        measure(server, args, result)
    result["loadavg_1m_at_end"] = round(os.getloadavg()[0], 2)
    if args.json:
        print(json.dumps(with_machine(result)))
    else:
        print_human(result)


if __name__ == "__main__":
    main()
