"""Submit benchmark: durable submits/s, submit latency, and submit-to-running latency.

Starts its own gpuyard server (free port, temporary state dir, declared GPUs) and measures:

1. start latency over HTTP: on the idle server, one job at a time, a 1-GPU job ``touch FILE``;
   t0 = time.time() just before the request is sent, running = FILE's st_mtime_ns.  Each job
   must have ended before the next is sent (nothing queued, a GPU free).
2. the same through the CLI, as a user types it: t0 just before ``gpuyard submit --gpus 1 --
   touch FILE`` is started as a subprocess.  Back to back, and after an idle gap.
3. sustained submits/s and per-request latency: every declared GPU is first occupied by a
   ``sleep 600`` job, then N 1-GPU jobs are submitted by several concurrent clients, each with
   one persistent (keep-alive) connection; the jobs stay PENDING, so this measures the API and
   the durable write (SQLite synchronous=FULL, group commit), not process spawning.
4. Slurm side by side (unless ``--no-slurm`` or Slurm cannot be installed here): a throw-away
   single-node cluster (bench/slurm_baseline.py), ``sbatch --gres=gpu:1 --wrap "touch FILE"``
   to FILE's mtime, back to back and after an idle gap.

With ``--postgres`` (a throw-away PostgreSQL server started through tests/postgres_server.py:
Debian's binaries, loopback, fsync and synchronous_commit on) or ``--db postgresql://...`` (an
empty database you can throw away), 1. and 3. are measured again on a second server whose
store is that database (``gpuyard server --db``), in the same run, next to SQLite's.

The server and every job it started are killed at the end (jobs are cancelled through the
API, then any supervisor left under the state dir is killed with its process tree).

    .venv/bin/python bench/submit.py            # human-readable
    .venv/bin/python bench/submit.py --json     # one JSON line
    .venv/bin/python bench/submit.py --postgres --no-slurm    # SQLite and PostgreSQL

Standard library + gpuyard only (``--postgres``: psycopg, the test extra's).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import http.client
import json
import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import slurm_baseline  # noqa: E402
from machine import with_machine  # noqa: E402

TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL",
            "OUT_OF_MEMORY"}  # fmt: skip


# -- small helpers ---------------------------------------------------------------------------
def make_tokens(server: Any, count: int) -> str:
    """`count` stored tokens of the server's user (scope submit); the last one's secret: the
    requests then authenticate through the account tokens' map, not the state dir's token."""
    api = server.api()
    body = json.dumps({"scope": "submit", "expires": "1d"}).encode()
    secret = ""
    for _ in range(count):
        status, raw = api.raw("POST", "/api/v1/tokens", body)
        if status != 201:
            raise RuntimeError(f"POST /api/v1/tokens answered {status}: {raw[:200]!r}")
        secret = json.loads(raw)["token"]
    return secret


def percentile(values: Sequence[float], q: float) -> float:
    return slurm_baseline.percentile(values, q)


def ms(seconds: float) -> float:
    return round(seconds * 1000.0, 2)


def gpuyard_argv() -> list[str]:
    """The `gpuyard` console script of this interpreter's environment."""
    script = Path(sys.executable).parent / "gpuyard"
    if script.exists():
        return [str(script)]
    found = shutil.which("gpuyard")
    if found:
        return [found]
    return [sys.executable, "-c", "from gpuyard.cli.main import main; main()"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def proc_cpu_s(pid: int) -> float:
    """utime + stime of one process (all its threads), in seconds."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of `pid` and its children (a PostgreSQL server's postmaster and the
    backends it forked; a backend that ended meanwhile is not counted)."""
    total = proc_cpu_s(pid)
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_bytes()
            except OSError:
                continue
            if int(stat[stat.rindex(b")") + 2 :].split()[1]) == pid:
                total += proc_cpu_s(int(name))
    return total


def wait_for_file(path: Path, timeout_s: float, poll_s: float = 0.005) -> os.stat_result:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return path.stat()
        except FileNotFoundError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{path} did not appear within {timeout_s:g} s") from None
            time.sleep(poll_s)


# -- HTTP client with one persistent connection ----------------------------------------------
class Api:
    """One keep-alive HTTP/1.1 connection to the server (http.client)."""

    def __init__(self, url: str, token: str, timeout_s: float = 60.0) -> None:
        parsed = urllib.parse.urlsplit(url)
        self._host = parsed.hostname or "127.0.0.1"
        self._port = parsed.port or 80
        self._timeout_s = timeout_s
        self._headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                         "Accept": "application/json"}  # fmt: skip
        self._conn: http.client.HTTPConnection | None = None

    def _connect(self) -> http.client.HTTPConnection:
        conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout_s)
        conn.connect()
        assert conn.sock is not None
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def raw(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        for attempt in (0, 1):
            if self._conn is None:
                self._conn = self._connect()
            try:
                self._conn.request(method, path, body=body, headers=self._headers)
                resp = self._conn.getresponse()
                return resp.status, resp.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.close()  # the server closed an idle keep-alive connection: reconnect once
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def json(self, method: str, path: str, body: Any = None) -> Any:
        payload = None if body is None else json.dumps(body).encode()
        status, data = self.raw(method, path, payload)
        if status >= 400:
            raise RuntimeError(f"{method} {path}: HTTP {status}: {data[:300]!r}")
        return json.loads(data)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def submit(self, command: list[str], gpus: int, workdir: str) -> dict[str, Any]:
        job: dict[str, Any] = self.json(
            "POST", "/api/v1/jobs", {"command": command, "gpus": gpus, "workdir": workdir}
        )
        return job

    def wait_ended(self, job_id: int, timeout_s: float = 60.0, poll_s: float = 0.005) -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            state: str = self.json("GET", f"/api/v1/jobs/{job_id}")["state"]
            if state in TERMINAL:
                return state
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {state} after {timeout_s:g} s")
            time.sleep(poll_s)


# -- the server under test -------------------------------------------------------------------
class LocalServer:
    """`gpuyard server` on a free port with a temporary state dir; `stop()` kills it and every
    job it started."""

    def __init__(self, gpus: int, cpus: int, keep: bool = False, db: str | None = None) -> None:
        self.gpus = gpus
        self.cpus = cpus
        self.keep = keep
        self.db = db  # `gpuyard server --db`; None: SQLite in the state dir
        self.root = Path(tempfile.mkdtemp(prefix="gpuyard-bench-"))
        self.state_dir = self.root / "state"
        self.workdir = self.root / "work"
        self.workdir.mkdir()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = ""
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60.0) -> LocalServer:
        argv = [*gpuyard_argv(), "server", "--port", str(self.port),
                "--state-dir", str(self.state_dir), "--gpus", str(self.gpus),
                "--cpus", str(self.cpus), "--kill-grace", "1",
                *(["--db", self.db] if self.db else [])]  # fmt: skip
        with open(self.root / "server.log", "wb") as log:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"gpuyard server exited ({self.proc.returncode}):\n"
                    + (self.root / "server.log").read_text(errors="replace")[-2000:]
                )
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", "/healthz")
                if conn.getresponse().status == 200:
                    conn.close()
                    break
                conn.close()
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"gpuyard server not healthy within {timeout_s:g} s")
            time.sleep(0.05)
        self.token = (self.state_dir / "token").read_text().strip()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def api(self) -> Api:
        return Api(self.url, self.token)

    def cli_env(self) -> dict[str, str]:
        return {**os.environ, "GPUYARD_URL": self.url, "GPUYARD_TOKEN": self.token}

    def stop(self) -> None:
        """Cancel running jobs, stop the server, kill any supervisor tree left, remove files."""
        if self.proc is not None and self.proc.poll() is None and self.token:
            api = self.api()
            try:
                running = [j["id"] for j in api.json("GET", "/api/v1/jobs")
                           if j["state"] == "RUNNING"]  # fmt: skip
                for job_id in running:
                    with contextlib.suppress(RuntimeError):
                        api.json("POST", f"/api/v1/jobs/{job_id}/cancel")
                for job_id in running:
                    with contextlib.suppress(TimeoutError, RuntimeError):
                        api.wait_ended(job_id, timeout_s=5, poll_s=0.05)
            except OSError:
                pass
            finally:
                api.close()
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        kill_supervisors(str(self.state_dir / "jobs"))
        if not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


def kill_supervisors(jobs_dir: str) -> int:
    """SIGKILL every process whose command line names `jobs_dir` (a job supervisor) and all
    of its descendants.  Returns how many processes were signalled."""
    parents: dict[int, int] = {}
    supervisors: list[int] = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            stat = Path(f"/proc/{pid}/stat").read_bytes()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        parents[pid] = int(stat[stat.rindex(b")") + 2 :].split()[1])
        if jobs_dir.encode() in cmdline and pid != os.getpid():
            supervisors.append(pid)
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    victims: list[int] = []
    todo = list(supervisors)
    while todo:
        pid = todo.pop()
        victims.append(pid)
        todo.extend(children.get(pid, ()))
    for pid in reversed(victims):  # descendants first, so the supervisor cannot respawn
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return len(victims)


# -- 1. and 2.: submit-to-running ------------------------------------------------------------
def measure_start_http(server: LocalServer, n: int, warmup: int = 2) -> list[float]:
    """t0 just before the POST; running = the file's mtime.  Sequential, nothing queued."""
    api = server.api()
    out = server.workdir / "start-http"
    out.mkdir()
    lat: list[float] = []
    try:
        for i in range(warmup + n):
            marker = out / f"ran-{i}"
            body = json.dumps({"command": ["touch", str(marker)], "gpus": 1,
                               "workdir": str(out)}).encode()  # fmt: skip
            t0 = time.time()
            status, data = api.raw("POST", "/api/v1/jobs", body)
            if status != 201:
                raise RuntimeError(f"submit failed: HTTP {status}: {data[:300]!r}")
            st = wait_for_file(marker, 30)
            if i >= warmup:
                lat.append(st.st_mtime_ns / 1e9 - t0)
            api.wait_ended(json.loads(data)["id"])
    finally:
        api.close()
    return lat


def measure_start_cli(
    server: LocalServer, n: int, gap: float = 0.0, warmup: int = 1, tag: str = "cli"
) -> tuple[list[float], list[float]]:
    """t0 just before `gpuyard submit --gpus 1 -- touch FILE` starts; running = the file's
    mtime.  Returns (submit-to-running, wall time of the CLI process)."""
    api = server.api()
    out = server.workdir / f"start-{tag}"
    out.mkdir()
    env = server.cli_env()
    cli = gpuyard_argv()
    lat: list[float] = []
    walls: list[float] = []
    try:
        for i in range(warmup + n):
            if gap > 0 and i >= warmup:
                time.sleep(gap)
            marker = out / f"ran-{i}"
            t0 = time.time()
            proc = subprocess.run(
                [*cli, "submit", "--gpus", "1", "--", "touch", str(marker)],
                cwd=out, env=env, capture_output=True, text=True, check=False,
            )  # fmt: skip
            t_exit = time.time()
            if proc.returncode != 0:
                raise RuntimeError(f"gpuyard submit failed: {proc.stderr.strip()}")
            st = wait_for_file(marker, 30)
            if i >= warmup:
                lat.append(st.st_mtime_ns / 1e9 - t0)
                walls.append(t_exit - t0)
            api.wait_ended(int(proc.stdout.strip()))
    finally:
        api.close()
    return lat, walls


# -- 3.: sustained submits -------------------------------------------------------------------
def occupy_gpus(server: LocalServer) -> list[int]:
    """Start one `sleep 600` per declared GPU and wait until all run."""
    api = server.api()
    try:
        ids = [api.submit(["sleep", "600"], 1, str(server.workdir))["id"]
               for _ in range(server.gpus)]  # fmt: skip
        deadline = time.monotonic() + 30
        while True:
            states = {j["id"]: j["state"] for j in api.json("GET", "/api/v1/jobs")}
            if all(states.get(i) == "RUNNING" for i in ids):
                return ids
            if time.monotonic() > deadline:
                raise TimeoutError(f"the GPU-holding jobs did not all start: {states}")
            time.sleep(0.05)
    finally:
        api.close()


def _client_worker(
    url: str, token: str, workdir: str, count: int, warmup: int, barrier: Any, results: Any,
    index: int,
) -> None:  # fmt: skip
    """One client: a persistent connection; `warmup` untimed submits, then `count` timed."""
    api = Api(url, token)
    body = json.dumps({"command": ["true"], "gpus": 1, "workdir": workdir}).encode()
    errors = 0
    try:
        for _ in range(warmup):
            api.raw("POST", "/api/v1/jobs", body)
        barrier.wait()
        cpu0 = time.thread_time()
        lat: list[float] = []
        t_start = time.time()
        for _ in range(count):
            t0 = time.perf_counter()
            status, _data = api.raw("POST", "/api/v1/jobs", body)
            lat.append(time.perf_counter() - t0)
            if status != 201:
                errors += 1
        t_end = time.time()
        cpu = time.thread_time() - cpu0
        results.put((index, t_start, t_end, lat, errors, cpu))
    except BaseException as exc:
        results.put((index, 0.0, 0.0, [], -1, repr(exc)))
        raise
    finally:
        api.close()


def measure_throughput(
    server: LocalServer, n: int, clients: int, mode: str, warmup_per_client: int = 20,
    database_pid: int | None = None,
) -> dict[str, Any]:  # fmt: skip
    per_client = [n // clients + (1 if i < n % clients else 0) for i in range(clients)]
    workdir = str(server.workdir)
    workers: list[Any]
    if mode == "processes":
        ctx = multiprocessing.get_context("fork")
        barrier: Any = ctx.Barrier(clients + 1)
        results: Any = ctx.Queue()
        workers = [
            ctx.Process(target=_client_worker, args=(server.url, server.token, workdir,
                        per_client[i], warmup_per_client, barrier, results, i), daemon=True)
            for i in range(clients)
        ]  # fmt: skip
    else:
        import queue

        barrier = threading.Barrier(clients + 1)
        results = queue.SimpleQueue()
        workers = [
            threading.Thread(target=_client_worker, args=(server.url, server.token, workdir,
                             per_client[i], warmup_per_client, barrier, results, i), daemon=True)
            for i in range(clients)
        ]  # fmt: skip
    for w in workers:
        w.start()
    barrier.wait(timeout=120)
    server_cpu0 = proc_cpu_s(server.pid)
    database_cpu0 = tree_cpu_s(database_pid) if database_pid else 0.0
    collected = [results.get(timeout=600) for _ in range(clients)]
    server_cpu = proc_cpu_s(server.pid) - server_cpu0
    database_cpu = tree_cpu_s(database_pid) - database_cpu0 if database_pid else None
    for w in workers:
        w.join(timeout=30)
    failed = [c for c in collected if c[4] == -1]
    if failed:
        raise RuntimeError(f"client failed: {failed[0][5]}")
    t_start = min(c[1] for c in collected)
    t_end = max(c[2] for c in collected)
    wall = t_end - t_start
    lat = [x for c in collected for x in c[3]]
    errors = sum(c[4] for c in collected)
    client_cpu = sum(c[5] for c in collected)
    return {
        "submits_per_s": round(n / wall, 1),
        "submit_p50_ms": ms(percentile(lat, 50)),
        "submit_p90_ms": ms(percentile(lat, 90)),
        "submit_p99_ms": ms(percentile(lat, 99)),
        "submit_max_ms": ms(max(lat)),
        "submit_errors": errors,
        "submit_wall_s": round(wall, 3),
        "server_cpu_cores": round(server_cpu / wall, 2),
        "server_cpu_ms_per_submit": round(server_cpu / n * 1000.0, 3),
        "client_cpu_cores": round(client_cpu / wall, 2),
        **({} if database_cpu is None else {
            "database_cpu_cores": round(database_cpu / wall, 2),
            "database_cpu_ms_per_submit": round(database_cpu / n * 1000.0, 3),
        }),
    }  # fmt: skip


def count_states(server: LocalServer) -> dict[str, int]:
    api = server.api()
    try:
        counts: dict[str, int] = {}
        for job in api.json("GET", "/api/v1/jobs"):
            counts[job["state"]] = counts.get(job["state"], 0) + 1
        return counts
    finally:
        api.close()


# -- 4.: Slurm ---------------------------------------------------------------------------------
def slurm_usable() -> str | None:
    """None when Slurm can run here, else why not."""
    if os.geteuid() != 0:
        return "not root (slurmd needs SlurmUser=root)"
    if not slurm_baseline.slurm_available() and not slurm_baseline.slurm_installable():
        return "Slurm not installed and not installable (needs apt-get)"
    return None


def measure_slurm(n: int, n_idle: int, gap: float, workdir: Path) -> dict[str, Any]:
    with slurm_baseline.slurm_cluster(workdir) as env:
        out = workdir / "jobs"
        slurm_baseline.measure_sbatch_to_running(env, 1, out)  # warm-up, not counted
        back = slurm_baseline.measure_sbatch_to_running(env, n, out, gap=0.0)
        idle = slurm_baseline.measure_sbatch_to_running(env, n_idle, out, gap=gap)
    return {
        "sbatch_to_running_p50_ms": ms(percentile(back, 50)),
        "sbatch_to_running_p99_ms": ms(percentile(back, 99)),
        "sbatch_n": len(back),
        "sbatch_idle_to_running_p50_ms": ms(percentile(idle, 50)),
        "sbatch_idle_to_running_p99_ms": ms(percentile(idle, 99)),
        "sbatch_idle_n": len(idle),
        "idle_gap_s": gap,
    }


# -- PostgreSQL: 1. and 3. again, the store on PostgreSQL -------------------------------------
@contextlib.contextmanager
def postgres_database(args: argparse.Namespace) -> Iterator[tuple[str, int | None] | None]:
    """The PostgreSQL database to measure and its server's pid when it is this machine's:
    `--db` (pid unknown), or a throw-away server's (`--postgres`, stopped and removed at the
    end), or None."""
    if args.db:
        yield args.db, None
        return
    if not args.postgres:
        yield None
        return
    sys.path.insert(0, str(HERE.parent))
    from tests.postgres_server import PostgresServer, find_bin_dir

    bin_dir = find_bin_dir()
    if bin_dir is None:
        raise SystemExit("--postgres: PostgreSQL's server is not installed (apt-get install "
                         "postgresql, or `make test` installs it)")  # fmt: skip
    server = PostgresServer(bin_dir)
    server.start()
    try:
        url = server.create_database("gpuyard_bench")
        postmaster = int((server.data / "postmaster.pid").read_text().split()[0])
        yield url, postmaster
    finally:
        server.stop()


def measure_store(
    args: argparse.Namespace, db: str, log: Any, database_pid: int | None
) -> dict[str, Any]:
    """Submit-to-running over HTTP and sustained durable submits, on a server whose store
    is `db`: the two figures the store is in the path of (the CLI's and Slurm's are not)."""
    server = LocalServer(args.gpus, cpus=max(args.gpus * 2, 2), keep=args.keep, db=db)
    out: dict[str, Any] = {}
    try:
        server.start()
        log(f"[PG 1/2] submit-to-running over HTTP, {args.start_n} jobs one at a time ...")
        lat = measure_start_http(server, args.start_n)
        out.update(start_p50_ms=ms(percentile(lat, 50)), start_p99_ms=ms(percentile(lat, 99)),
                   start_n=len(lat))  # fmt: skip
        log(f"[PG 2/2] {args.n} submits by {args.clients} clients ({args.mode}), GPUs busy ...")
        holders = occupy_gpus(server)
        out.update(measure_throughput(server, args.n, args.clients, args.mode,
                                      database_pid=database_pid))  # fmt: skip
        counts = count_states(server)
        out["pending_after"] = counts.get("PENDING", 0)
        if counts.get("RUNNING", 0) != len(holders):
            out["warning"] = f"expected only the {len(holders)} holders running: {counts}"
    finally:
        server.stop()
    return out


# -- main ---------------------------------------------------------------------------------------
@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """SIGTERM/SIGHUP become KeyboardInterrupt, so `finally` blocks clean up."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def run(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {
        "benchmark": "submit",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "clients": args.clients,
        "client_mode": args.mode,
        "n": args.n,
        "gpus_declared": args.gpus,
        "idle_gap_s": args.idle_gap,
    }
    log = (lambda *a: None) if args.json else (lambda *a: print(*a, file=sys.stderr, flush=True))
    server = LocalServer(args.gpus, cpus=max(args.gpus * 2, 2), keep=args.keep)
    try:
        server.start()
        log(f"server up at {server.url} (state {server.state_dir})")
        if args.user_tokens:
            server.token = make_tokens(server, args.user_tokens)
            result["user_tokens"] = args.user_tokens

        log(f"[1/4] submit-to-running over HTTP, {args.start_n} jobs one at a time ...")
        lat = measure_start_http(server, args.start_n)
        result.update(start_p50_ms=ms(percentile(lat, 50)), start_p99_ms=ms(percentile(lat, 99)),
                      start_n=len(lat))  # fmt: skip

        log(f"[2/4] submit-to-running through `gpuyard submit`, {args.cli_n} jobs ...")
        lat, walls = measure_start_cli(server, args.cli_n)
        result.update(
            cli_submit_to_running_p50_ms=ms(percentile(lat, 50)),
            cli_submit_to_running_p99_ms=ms(percentile(lat, 99)),
            cli_submit_wall_p50_ms=ms(percentile(walls, 50)),
            cli_n=len(lat),
        )
        if args.slurm_idle_n > 0 and args.idle_gap > 0:
            log(f"      ... and {args.slurm_idle_n} after {args.idle_gap:g} s idle each")
            lat, _ = measure_start_cli(server, args.slurm_idle_n, gap=args.idle_gap, tag="idle")
            result.update(cli_idle_submit_to_running_p50_ms=ms(percentile(lat, 50)),
                          cli_idle_n=len(lat))  # fmt: skip

        log(f"[3/4] {args.n} submits by {args.clients} clients ({args.mode}), GPUs all busy ...")
        holders = occupy_gpus(server)
        result.update(measure_throughput(server, args.n, args.clients, args.mode))
        counts = count_states(server)
        result["pending_after"] = counts.get("PENDING", 0)
        result["running_after"] = counts.get("RUNNING", 0)
        if counts.get("RUNNING", 0) != len(holders):
            result["warning"] = f"expected only the {len(holders)} holders running: {counts}"
    finally:
        server.stop()

    with postgres_database(args) as database:
        if database is not None:
            log(f"server on PostgreSQL ({'--postgres' if args.postgres else '--db'}) ...")
            url, pid = database
            result["postgresql"] = measure_store(args, url, log, pid)

    reason = "--no-slurm" if args.no_slurm else slurm_usable()
    if reason is None:
        log(f"[4/4] Slurm: {args.slurm_n} sbatch back to back, {args.slurm_idle_n} after "
            f"{args.idle_gap:g} s idle ...")  # fmt: skip
        slurm_dir = Path(tempfile.mkdtemp(prefix="gpuyard-bench-slurm-"))
        try:
            result.update(measure_slurm(args.slurm_n, args.slurm_idle_n, args.idle_gap,
                                        slurm_dir))  # fmt: skip
        except (slurm_baseline.SlurmBaselineError, TimeoutError) as exc:
            result["slurm_skipped"] = f"Slurm failed: {exc}"
        finally:
            if not args.keep:
                shutil.rmtree(slurm_dir, ignore_errors=True)
    else:
        result["slurm_skipped"] = reason

    cli = result["cli_submit_to_running_p50_ms"]
    if "sbatch_to_running_p50_ms" in result:
        ratio = round(result["sbatch_to_running_p50_ms"] / cli, 1)
        result["slurm_over_gpuyard_cli"] = ratio
        result["speedup_vs_sbatch"] = ratio
        idle_cli = result.get("cli_idle_submit_to_running_p50_ms", cli)
        ratio = round(result["sbatch_idle_to_running_p50_ms"] / idle_cli, 1)
        result["slurm_idle_over_gpuyard_cli"] = ratio
        result["speedup_vs_sbatch_idle"] = ratio
    else:
        for key in ("sbatch_to_running_p50_ms", "sbatch_idle_to_running_p50_ms",
                    "speedup_vs_sbatch", "speedup_vs_sbatch_idle"):  # fmt: skip
            result[key] = None
    return result


def human(r: dict[str, Any]) -> str:
    lines = [
        f"gpuyard submit benchmark, {r['date']}, {r['cpus']} CPUs ({r['cpu_model']}), "
        f"Python {r['python']}",
        f"  sustained submits ({r['n']} jobs, {r['clients']} {r['client_mode']}, keep-alive, "
        f"all {r['gpus_declared']} GPUs busy so jobs pend):",
        f"    {r['submits_per_s']:.0f} submits/s   p50 {r['submit_p50_ms']:.1f} ms   "
        f"p90 {r['submit_p90_ms']:.1f} ms   p99 {r['submit_p99_ms']:.1f} ms   "
        f"errors {r['submit_errors']}",
        f"    CPU during the run: server {r['server_cpu_cores']:.2f} cores "
        f"({r['server_cpu_ms_per_submit']:.2f} ms per submit), "
        f"clients {r['client_cpu_cores']:.2f} cores",
        f"  submit-to-running over HTTP ({r['start_n']} jobs, one at a time):",
        f"    p50 {r['start_p50_ms']:.1f} ms   p99 {r['start_p99_ms']:.1f} ms",
        f"  submit-to-running through `gpuyard submit` ({r['cli_n']} jobs):",
        f"    p50 {r['cli_submit_to_running_p50_ms']:.1f} ms   "
        f"p99 {r['cli_submit_to_running_p99_ms']:.1f} ms   "
        f"(CLI wall p50 {r['cli_submit_wall_p50_ms']:.1f} ms)",
    ]
    pg = r.get("postgresql")
    if pg is not None:
        database_cpu = (
            f", PostgreSQL {pg['database_cpu_cores']:.2f} cores "
            f"({pg['database_cpu_ms_per_submit']:.2f} ms per submit)"
            if "database_cpu_cores" in pg
            else ""
        )
        lines += [
            "  the store on PostgreSQL (same run, same load; SQLite's above):",
            f"    {pg['submits_per_s']:.0f} submits/s   p50 {pg['submit_p50_ms']:.1f} ms   "
            f"p90 {pg['submit_p90_ms']:.1f} ms   p99 {pg['submit_p99_ms']:.1f} ms   "
            f"errors {pg['submit_errors']}",
            f"    CPU: server {pg['server_cpu_cores']:.2f} cores "
            f"({pg['server_cpu_ms_per_submit']:.2f} ms per submit){database_cpu}",
            f"    submit-to-running over HTTP: p50 {pg['start_p50_ms']:.1f} ms   "
            f"p99 {pg['start_p99_ms']:.1f} ms",
        ]
    if "cli_idle_submit_to_running_p50_ms" in r:
        lines.append(f"    after {r.get('idle_gap_s', '?')} s idle: p50 "
                     f"{r['cli_idle_submit_to_running_p50_ms']:.1f} ms")  # fmt: skip
    if r.get("sbatch_to_running_p50_ms") is not None:
        lines += [
            "  Slurm (default scheduling config), `sbatch --gres=gpu:1 --wrap 'touch FILE'`:",
            f"    back to back: p50 {r['sbatch_to_running_p50_ms']:.1f} ms  "
            f"-> gpuyard CLI {r['speedup_vs_sbatch']:.1f}x faster",
            f"    after {r['idle_gap_s']:g} s idle: p50 {r['sbatch_idle_to_running_p50_ms']:.1f} ms"
            f"  -> gpuyard CLI {r['speedup_vs_sbatch_idle']:.1f}x faster",
        ]
    else:
        lines.append(f"  Slurm: skipped ({r.get('slurm_skipped')})")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--json", action="store_true", help="print one JSON line")
    ap.add_argument("-n", "--n", type=int, default=5000, help="submits to time (default 5000)")
    ap.add_argument("--clients", type=int, default=8, help="concurrent clients (default 8)")
    ap.add_argument(
        "--mode",
        choices=("processes", "threads"),
        default="processes",
        help="clients as processes (default; no shared GIL) or threads",
    )
    ap.add_argument("--gpus", type=int, default=4, help="GPUs the server declares (default 4)")
    ap.add_argument(
        "--start-n", type=int, default=50, help="jobs for HTTP submit-to-running (default 50)"
    )
    ap.add_argument(
        "--cli-n",
        type=int,
        default=20,
        help="jobs for CLI submit-to-running, back to back (default 20)",
    )
    ap.add_argument("--slurm-n", type=int, default=20, help="sbatch back to back (default 20)")
    ap.add_argument(
        "--slurm-idle-n",
        type=int,
        default=8,
        help="sbatch (and gpuyard CLI) after an idle gap (default 8)",
    )
    ap.add_argument("--idle-gap", type=float, default=5.0, help="idle gap, s (default 5)")
    ap.add_argument("--no-slurm", action="store_true", help="skip the Slurm baseline")
    ap.add_argument(
        "--user-tokens", type=int, default=0,
        help="make N stored tokens (POST /api/v1/tokens) and submit with the last, scope submit, "
        "instead of the state dir's admin token (default 0: the state dir's)",
    )  # fmt: skip
    ap.add_argument("--keep", action="store_true", help="keep the temporary state dirs")
    pg = ap.add_mutually_exclusive_group()
    pg.add_argument(
        "--postgres", action="store_true",
        help="also measure a server on a throw-away PostgreSQL server (tests/postgres_server.py)",
    )  # fmt: skip
    pg.add_argument(
        "--db", metavar="URL",
        help="also measure a server on this PostgreSQL database (postgresql://...; an empty "
        "one: the run leaves its jobs there)",
    )  # fmt: skip
    args = ap.parse_args(argv)
    if args.n < args.clients or args.clients < 1:
        ap.error("need n >= clients >= 1")
    with _signals_raise():
        result = run(args)
    print(json.dumps(with_machine(result)) if args.json else human(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
