"""A server with a long history: 1,000,000 finished jobs in its SQLite database.

Targets (issue 10, section 4): the server starts in <= 5 s and uses <= 300 MiB RSS; history
pages (`page_jobs`: newest first, keyset, filtered by state/owner/name/time) stay <= 50 ms.

What it does:
1. builds the database once (`--db`, reused when it already holds the jobs): the schema through
   `SqlJobStore` (migrations), then rows from `job_to_row` inserted with `executemany` in big
   transactions, not through the group-commit writer (setup, not the thing measured);
2. in a fresh interpreter: open the store, `load_active(10_000)`, `max_job_id()`, build the
   bounded `JobBook` (what the server's start does), wall time and peak RSS (getrusage);
   with `--baseline`, the same for loading every job (`load_jobs()`, the old start);
3. a real `gpuyard server` on a free loopback port over that state dir: time from spawn until
   `/healthz` answers, and its RSS (VmRSS, VmHWM) a second later; the same on an empty state
   dir as the baseline (a ratio holds on a noisy machine, an absolute time does not);
4. p50/p99 of `page_jobs` queries (first page, a deep page, each filter), in this process;
5. with `--migration`, the one-time upgrade of a previous release's database of that size.

    .venv/bin/python bench/history.py --json [--jobs 1000000] [--db PATH] [--baseline]
                                             [--migration]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from machine import with_machine

ROOT = Path(__file__).resolve().parent.parent
T0 = 1_700_000_000.0  # the first job's submit time
GAP_S = 30.0  # one job every 30 s: a million jobs is about a year of history
OWNERS = [f"user{i:02d}" for i in range(20)]
NAMES = [f"exp-{i:02d}" for i in range(50)]
KEEP_FINISHED = 10_000
SEED = "SEED0"  # replaced by each job's number in its spec (`_own_spec`)
PENDING_GPUS = 8  # `--pending`'s jobs ask for 8 GPUs of the server's 4: they never start
# Every 1,000th job ended NODE_FAIL: a rare state, the hardest case for a state filter.
STATES = ["COMPLETED"] * 7 + ["FAILED", "CANCELLED", "TIMEOUT"]


def build_database(path: Path, n_jobs: int, revision: str = "head", pending: int = 0) -> float:
    """The schema through the store's migrations (up to `revision`), then `n_jobs` finished
    jobs and `pending` PENDING ones after them (each asking for more GPUs than the server has,
    so none ever starts: the queue stays that deep); seconds taken."""
    from gpuyard.adapters.store.codec import job_to_row
    from gpuyard.adapters.store.sql import SqlJobStore, sqlite_url
    from gpuyard.adapters.store.tables import jobs
    from gpuyard.domain.job import Job, JobSpec
    from gpuyard.domain.states import JobState

    began = time.perf_counter()
    path.parent.mkdir(parents=True, exist_ok=True)
    if revision == "head":
        SqlJobStore(sqlite_url(path)).close()
    else:
        _migrate_to(path, revision)
    columns = tuple(jobs.c.keys())
    spec = JobSpec(argv=("python", "train.py", "--lr", "0.001", "--epochs", "90", "--seed", SEED),
                   name="x", workdir="/home/user00/project", gpus=2, cpus=8, mem_mib=32768,
                   time_limit_s=86400, env=(("WANDB_MODE", "offline"), ("SEED", "1")))  # fmt: skip
    template = job_to_row(Job(id=0, spec=spec, owner="x", state=JobState.COMPLETED,
                              submitted_at=T0, gpus=(0, 1), version=3))  # fmt: skip
    marks = ", ".join("?" for _ in columns)
    sql = f"INSERT INTO jobs ({', '.join(columns)}) VALUES ({marks})"
    with contextlib.closing(sqlite3.connect(path)) as raw:  # closing checkpoints the WAL
        raw.execute("PRAGMA synchronous=OFF")
        for first in range(1, n_jobs + 1, 100_000):
            rows = [
                _row(template, columns, i) for i in range(first, min(n_jobs, first + 99_999) + 1)
            ]
            raw.executemany(sql, rows)
            raw.commit()
        if pending:
            from dataclasses import replace

            waiting = job_to_row(Job(id=0, spec=replace(spec, gpus=PENDING_GPUS), owner="x",
                                     state=JobState.PENDING, submitted_at=T0))  # fmt: skip
            rows = [_pending_row(waiting, columns, n_jobs + k) for k in range(1, pending + 1)]
            raw.executemany(sql, rows)
            raw.commit()
    return time.perf_counter() - began


def _own_spec(template: dict[str, Any], i: int) -> str:
    """The template's spec with the job's own seed: no two jobs' specs are the same text (as
    on a real server, where only an array's tasks share one)."""
    return str(template["spec"]).replace(f'"{SEED}"', f'"{i}"')


def _pending_row(template: dict[str, Any], columns: tuple[str, ...], i: int) -> tuple[Any, ...]:
    row = {**template, "id": i, "name": NAMES[(i * 7) % len(NAMES)], "spec": _own_spec(template, i),
           "owner": OWNERS[i % len(OWNERS)], "submitted_at": T0 + i * GAP_S}  # fmt: skip
    return tuple(row[c] for c in columns)


def _migrate_to(path: Path, revision: str) -> None:
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import create_engine

    from gpuyard.adapters.store import sql

    config = Config()
    config.set_main_option("script_location", str(Path(sql.__file__).parent / "migrations"))
    engine = create_engine(sql.sqlite_url(path))
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, revision)
    engine.dispose()


def measure_migration(n_jobs: int) -> dict[str, float]:
    """A database of the previous release (0004) with `n_jobs` jobs, opened by this one: the
    one-time upgrade (TEXT columns, history indexes) the first start after an update pays."""
    from gpuyard.adapters.store.sql import SqlJobStore, sqlite_url

    root = Path(tempfile.mkdtemp(prefix="gpuyard-hist-migrate-"))
    try:
        db = root / "gpuyard.db"
        build_database(db, n_jobs, revision="0004")
        began = time.perf_counter()
        SqlJobStore(sqlite_url(db)).close()
        return {"upgrade_0004_to_head_s": round(time.perf_counter() - began, 2)}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _row(template: dict[str, Any], columns: tuple[str, ...], i: int) -> tuple[Any, ...]:
    submitted = T0 + i * GAP_S
    state = "NODE_FAIL" if i % 1000 == 0 else STATES[i % len(STATES)]
    row = {**template, "id": i, "name": NAMES[(i * 7) % len(NAMES)], "state": state,
           "spec": _own_spec(template, i),
           "owner": OWNERS[i % len(OWNERS)], "submitted_at": submitted,
           "started_at": submitted + 5.0, "ended_at": submitted + 5.0 + (i * 37) % 7200,
           "exit_code": 0 if state == "COMPLETED" else 1,
           "reason": "None" if state == "COMPLETED" else f"{state}: exit code 1"}  # fmt: skip
    return tuple(row[c] for c in columns)


def count_jobs(path: Path) -> int:
    if not path.exists():
        return 0
    try:
        with contextlib.closing(sqlite3.connect(path)) as raw:
            return int(raw.execute("SELECT count(*) FROM jobs").fetchone()[0])
    except sqlite3.DatabaseError:
        return 0


CHILD = """
import json, resource, sys, time
began = time.perf_counter()
from gpuyard.adapters.store.sql import SqlJobStore, sqlite_url
from gpuyard.services.jobs.book import JobBook
imported = time.perf_counter()
store = SqlJobStore(sqlite_url(sys.argv[1]))
keep = 10**9 if sys.argv[2] == "all" else int(sys.argv[2])
jobs = store.load_jobs() if sys.argv[2] == "all" else store.load_active(keep)
book = JobBook(jobs, next_id=store.max_job_id() + 1, keep_finished=keep)
done = time.perf_counter()
store.close()
print(json.dumps({"import_s": imported - began, "load_s": done - imported, "loaded": len(jobs),
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def measure_load(db: Path, what: str) -> dict[str, float]:
    """Open the store and build the book in a fresh interpreter: its time and peak RSS."""
    out = subprocess.run([sys.executable, "-c", CHILD, str(db), what], check=True,
                         capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    figures: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return {k: round(v, 3) for k, v in figures.items()}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def proc_status_mib(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def measure_server_start(state_dir: Path, timeout_s: float,
                         py_spy: Path | None = None) -> dict[str, Any]:  # fmt: skip
    """Spawn `gpuyard server` on the state dir; seconds until /healthz answers, and RSS then.
    `py_spy`: run it under `py-spy record` (raw collapsed stacks written there; the server is
    stopped right after /healthz answers, so the samples are the start's)."""
    script = Path(sys.executable).parent / "gpuyard"
    port = free_port()
    argv = [str(script), "server", "--port", str(port), "--state-dir", str(state_dir),
            "--gpus", "4", "--cpus", "2"]  # fmt: skip
    if py_spy is not None:
        spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        argv = [spy, "record", "--format", "raw", "-r", "200", "-o", str(py_spy), "--", *argv]
    log_path = state_dir.parent / "server.log"
    with open(log_path, "wb") as log:
        began = time.perf_counter()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        while not _healthy(port):
            if proc.poll() is not None:
                tail = log_path.read_text(errors="replace")[-1500:]
                raise RuntimeError(f"gpuyard server exited ({proc.returncode}):\n{tail}")
            if time.perf_counter() - began > timeout_s:
                return {"start_s": None, "timed_out_after_s": timeout_s,
                        "rss_mib": proc_status_mib(proc.pid, "VmRSS")}  # fmt: skip
            time.sleep(0.02)
        start_s = time.perf_counter() - began
        if py_spy is not None:  # stop the server (py-spy's child): py-spy writes and exits
            import psutil

            for child in psutil.Process(proc.pid).children():
                child.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
            return {"start_s": round(start_s, 3), "phases": start_phases(py_spy),
                    "profile": top_frames(py_spy)}  # fmt: skip
        time.sleep(1.0)  # let the first ticks and samples run, then read memory
        return {"start_s": round(start_s, 3), "rss_mib": proc_status_mib(proc.pid, "VmRSS"),
                "peak_rss_mib": proc_status_mib(proc.pid, "VmHWM")}  # fmt: skip
    finally:
        with contextlib.suppress(ProcessLookupError):  # py-spy and its server may be gone
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# What the start's main thread does, by the first frame of these a sample's stack holds (the
# most specific first): the store's load (SQLite's rows, the specs' JSON, the rest of decoding
# them), the scheduler's rebuild (the policy's replay, the events and the gate), the book,
# importing modules, the HTTP server's start.
PHASES = (
    ("load: rows from SQLite", "CursorFetchStrategy"),
    ("load: specs' JSON", "JSONDecoder"),
    ("load: decoding", "SqlJobStore.load_active"),
    ("rebuild: policy replay", "replay_past"),
    ("rebuild: events, gate", "LiveScheduler.rebuild"),
    ("book", "JobBook.__init__"),
    ("imports", "_find_and_load"),
    ("HTTP server start", "http_server.py"),
)


def start_phases(raw: Path) -> dict[str, float]:
    """Shares (%) of the main thread's samples in each of PHASES, the rest as "other"."""
    counts: dict[str, int] = {}
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit() or "Thread._bootstrap" in stack:  # another thread's sample
            continue
        phase = next((name for name, frame in PHASES if frame in stack), "other")
        counts[phase] = counts.get(phase, 0) + int(count)
    total = max(sum(counts.values()), 1)
    return {
        name: round(100 * c / total, 1) for name, c in sorted(counts.items(), key=lambda kv: -kv[1])
    }


def top_frames(raw: Path, n: int = 25) -> list[tuple[str, float]]:
    """The functions the start spent its samples in, cumulative (a frame counted once per
    stack), as shares of all samples: py-spy's raw output is `frame;frame;... count` lines."""
    total = 0
    counts: dict[str, int] = {}
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        total += int(count)
        for frame in set(stack.split(";")):
            counts[frame] = counts.get(frame, 0) + int(count)
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])[:n]
    return [(frame, round(100 * c / max(total, 1), 1)) for frame, c in ranked]


def _healthy(port: int) -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", "/healthz")
        ok = conn.getresponse().status == 200
        conn.close()
        return ok
    except OSError:
        return False


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def measure_pages(db: Path, n_jobs: int, repeat: int) -> dict[str, dict[str, float]]:
    """p50/p99 (ms) of each history query, `repeat` times each, limit 50."""
    from gpuyard.adapters.store.sql import SqlJobStore, sqlite_url
    from gpuyard.domain.states import JobState

    newest = T0 + n_jobs * GAP_S
    cases: dict[str, dict[str, Any]] = {
        "first_page": {},
        "deep_page": {"before_id": 10_000},
        "state_failed": {"states": [JobState.FAILED]},
        "state_failed_deep": {"states": [JobState.FAILED], "before_id": 10_000},
        "state_rare_node_fail": {"states": [JobState.NODE_FAIL]},
        "states_failed_or_timeout": {"states": [JobState.FAILED, JobState.TIMEOUT]},
        "owner": {"owner": "user07"},
        "name": {"name": "exp-13"},
        "since_last_day": {"since": newest - 86400},
        "owner_and_rare_state": {"owner": "user00", "states": [JobState.NODE_FAIL]},
        "active_only": {"states": [JobState.PENDING, JobState.RUNNING]},
        # The worst case found: two filters with no common job, each index scanned whole
        # (a name's 20,000 jobs): linear in the jobs of that name.
        "name_and_owner_no_match": {"owner": "user03", "name": "exp-13"},
    }
    store = SqlJobStore(sqlite_url(db))
    results: dict[str, dict[str, float]] = {}
    try:
        for label, filters in cases.items():
            times = _timed(_page(store, filters), repeat)
            results[label] = {
                "p50_ms": round(percentile(times, 50) * 1000, 2),
                "p99_ms": round(percentile(times, 99) * 1000, 2),
                "rows": len(store.page_jobs(limit=50, **filters)),
            }
    finally:
        store.close()
    return results


def _page(store: Any, filters: dict[str, Any]) -> Callable[[], object]:
    return lambda: store.page_jobs(limit=50, **filters)


def _timed(call: Callable[[], object], repeat: int) -> list[float]:
    call()  # warm the page cache and the statement cache
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        call()
        times.append(time.perf_counter() - began)
    return times


def run(args: argparse.Namespace) -> dict[str, Any]:
    temporary = None if args.db else Path(tempfile.mkdtemp(prefix="gpuyard-hist-"))
    db = Path(args.db) if args.db else Path(str(temporary)) / "state" / "gpuyard.db"
    result: dict[str, Any] = {
        "bench": "history", "jobs": args.jobs, "keep_finished": KEEP_FINISHED,
    }  # fmt: skip
    try:
        if count_jobs(db) != args.jobs + args.pending:
            if db.exists():
                raise SystemExit(f"{db} exists with other jobs; remove it or pick another --db")
            result["build_s"] = round(build_database(db, args.jobs, pending=args.pending), 1)
        result["pending"] = args.pending
        result["db_mib"] = round(db.stat().st_size / 2**20, 1)
        result["load_active"] = measure_load(db, str(KEEP_FINISHED))
        if args.baseline:
            result["load_all_baseline"] = measure_load(db, "all")
        result["server"] = measure_server_start(db.parent, args.server_timeout)
        if args.py_spy:
            raw = db.parent.parent / "start.pyspy.txt"
            result["server_profiled"] = measure_server_start(db.parent, args.server_timeout, raw)
        if args.server_only:
            return result
        # The same server on an empty state dir: what a start costs without any history.
        empty = Path(tempfile.mkdtemp(prefix="gpuyard-hist-empty-"))
        try:
            (empty / "state").mkdir()
            result["server_empty_baseline"] = measure_server_start(empty / "state", 60.0)
        finally:
            shutil.rmtree(empty, ignore_errors=True)
        start_s, empty_s = result["server"]["start_s"], result["server_empty_baseline"]["start_s"]
        if start_s and empty_s:
            result["server_start_ratio_to_empty"] = round(start_s / empty_s, 2)
        result["pages"] = measure_pages(db, args.jobs, args.repeat)
        if args.migration:
            result["migration"] = measure_migration(args.jobs)
    finally:
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON line")
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--db", help="state-dir/gpuyard.db to build once and reuse [temporary]")
    parser.add_argument("--baseline", action="store_true", help="also time loading every job")
    parser.add_argument("--migration", action="store_true",
                        help="also time upgrading a database of the previous release")  # fmt: skip
    parser.add_argument("--repeat", type=int, default=200, help="runs of each page query")
    parser.add_argument("--server-timeout", type=float, default=300.0)
    parser.add_argument("--pending", type=int, default=0,
                        help="PENDING jobs after the finished ones (issue 27: 10000)")
    parser.add_argument("--py-spy", action="store_true",
                        help="also profile one start with py-spy (where its time goes)")
    parser.add_argument("--server-only", action="store_true",
                        help="the server's start only: no empty baseline, pages, migration")
    args = parser.parse_args(argv)
    result = run(args)
    print(json.dumps(with_machine(result)) if args.json else json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
