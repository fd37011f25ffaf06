"""The chaos rig (issue 12): a real server, short jobs, SIGKILLs at random and named moments,
then the guarantees checked from the database and from what the jobs themselves wrote.

One `ChaosRig.run()`:
- a server (tests/e2e/server.py ServerProcess) with 4 declared GPUs of 80 GiB, the default
  (preemptive) policy, a 2 s kill grace;
- a submitter thread: planned jobs (`make_plans`: 1, 2 or 4 GPUs, a few sharing one GPU with
  --gpu-mem 20G, some preemptible, some urgent (priority 5: they preempt), a few that fail with
  exit code 7, a few long ones cancelled soon after their submit) at a steady rate over HTTP.
  A job is *acknowledged* once its 201 came back. A request whose connection was refused never
  reached the server and is sent again; one whose reply was lost is *in flight*: sent again
  with the same `Idempotency-Key` when the server takes one (`idempotent=True`), else left and
  only counted (it may or may not exist; it must not exist twice);
- a canceller thread: cancels the planned jobs a moment after their acknowledgement, again
  until a reply comes;
- a drainer thread: now and then drains a GPU (half of the time with --now, which requeues its
  jobs) and resumes it a moment later;
- a killer thread: SIGKILLs the server `kills` times and restarts it on the same state dir.
  Every other start arms a named crash point (services/jobs/crashpoints.py, cycled through all of
  them) so the named moments are hit for certain: the server kills itself there; if it is not
  reached in time it is killed from outside (said so in the kill's record). The others are
  killed from outside at a random moment.
Then a last start without chaos, every GPU resumed, every job left to reach a final state, a
clean stop, and `check()` (see `Report`).

Each job runs tests/chaos/job.py (`python -S`, milliseconds to start), which appends to
RECORDS/<job id> when it started (CLOCK_MONOTONIC, pid, its CUDA_VISIBLE_DEVICES) and when it
ended (its exit code) or was stopped (SIGTERM). Standard library + gpuyard's test helpers.
"""

from __future__ import annotations

import heapq
import http.client
import itertools
import json
import random
import sqlite3
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from gpuyard.services.jobs.crashpoints import ENV_VAR, POINTS
from tests.e2e.server import ServerProcess

JOB_PROGRAM = Path(__file__).with_name("job.py")
GPUS = 4
GPU_MEM_MIB = 80 * 1024
FAIL_CODE = 7
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}
# How many hits of each point before it fires, at most: frequent points get a later hit, so
# a crash lands anywhere in the run rather than always at the first write after a start.
_HITS_MAX = {
    "journal_written": 30,
    "submit_reply": 20,
    "pass_decided": 10,
    "start_recorded": 10,
    "launched": 6,
    "preempt_recorded": 1,
    "drain_saved": 1,
}


@dataclass(frozen=True)
class Plan:
    """One job the submitter will send; `n` is its name (`chaos-n`) and idempotency key."""

    n: int
    gpus: int
    gpu_mem: str | None
    preemptible: bool
    priority: int
    seconds: float
    exit_code: int
    cancel_after_s: float | None

    @property
    def name(self) -> str:
        return f"chaos-{self.n}"


def make_plans(count: int, rng: random.Random) -> list[Plan]:
    """The mix: ~45% 1 GPU, 25% 2, 10% 4, 10% a shared GPU (--gpu-mem 20G); a third of the
    whole-GPU ones preemptible (they run longer, so that there is something to preempt), a
    tenth urgent (priority 5: they preempt the preemptible ones); 8% exit 7; 6% run long and
    are cancelled 0.1-2 s after their acknowledgement."""
    plans = []
    for n in range(count):
        size = rng.random()
        gpus, gpu_mem = (1, "20G") if size < 0.1 else (rng.choice([1, 1, 1, 1, 2, 2, 2, 4]), None)
        preemptible = gpu_mem is None and rng.random() < 0.35
        priority = 5 if not preemptible and rng.random() < 0.12 else 0
        seconds = rng.uniform(0.5, 1.5) if preemptible else rng.uniform(0.05, 0.5)
        exit_code = FAIL_CODE if rng.random() < 0.08 else 0
        cancel_after_s = None
        if rng.random() < 0.06:
            seconds, exit_code, cancel_after_s = 20.0, 0, rng.uniform(0.1, 2.0)
        plans.append(
            Plan(
                n,
                gpus,
                gpu_mem,
                preemptible,
                priority,
                round(seconds, 3),
                exit_code,
                cancel_after_s,
            )
        )
    return plans


@dataclass
class Kill:
    """One SIGKILL of the server: when (seconds into the run), where, how."""

    at_s: float
    point: str  # a crash point's name, or "random"
    how: str  # "crash point" (the server killed itself there) or "external"
    note: str = ""


@dataclass
class Run:
    """One run of a job, from its own record."""

    job_id: int
    pid: int
    start: float
    end: float | None
    how: str  # "end" (exited with `code`), "stop" (SIGTERM), "open" (no end recorded)
    code: int | None
    gpus: tuple[int, ...]
    gpu_mem_mib: int


@dataclass
class Report:
    """What the run showed. `problems` lists each broken guarantee with the jobs concerned;
    empty means: every acknowledged job exists exactly once, none ran twice at once, no GPU
    was held by two jobs at once (shared ones within their memory), every final state and
    exit code is true, and everything reached a final state after the last restart."""

    jobs_planned: int = 0
    acknowledged: int = 0
    in_flight: int = 0  # replies lost (without idempotency): may or may not exist, never twice
    in_flight_committed: int = 0
    replayed: int = 0  # resent (same key) after a lost reply: answered with the first job
    lost: int = 0
    duplicated: int = 0
    double_run: int = 0
    double_booked: int = 0
    wrong_state: int = 0
    not_final: int = 0
    runs: int = 0
    preempted_or_requeued_runs: int = 0
    cancels: int = 0
    drains: int = 0
    kills_survived: int = 0
    kills_by_point: dict[str, int] = field(default_factory=dict)
    idempotent_submits: bool = False
    elapsed_s: float = 0.0
    kills: list[Kill] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        out = asdict(self)
        out["kills"] = [
            f"{k.at_s:.1f}s {k.point} ({k.how}{', ' + k.note if k.note else ''})"
            for k in self.kills
        ]
        return out


class _Http:
    """One request per connection to the server's API; connection errors are the caller's (a
    reply cut off mid-body, as a SIGKILL does, is one: `ConnectionResetError`)."""

    def __init__(self, port: int, token: str) -> None:
        self.port = port
        self.token = token

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=15)
        try:
            hdrs = {"Authorization": f"Bearer {self.token}", **(headers or {})}
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                hdrs["Content-Type"] = "application/json"
            conn.request(method, path, body=data, headers=hdrs)
            try:
                resp = conn.getresponse()
                raw = resp.read()
            except http.client.HTTPException as exc:  # killed mid-reply: the reply is lost
                raise ConnectionResetError(f"reply cut off: {exc!r}") from exc
            return resp.status, (json.loads(raw) if raw else None)
        finally:
            conn.close()


def server_takes_idempotency_keys() -> bool:
    """Whether this gpuyard's submit answers a resent `Idempotency-Key` with the first job."""
    from gpuyard.api import submit_route

    return hasattr(submit_route, "IDEMPOTENCY_KEY")


def _refused(exc: OSError) -> bool:
    """The request never reached the server (nothing listened): safe to send again."""
    return isinstance(exc, ConnectionRefusedError)


class ChaosRig:
    def __init__(
        self,
        workdir: Path,
        jobs: int = 300,
        kills: int = 20,
        seed: int = 12,
        submit_rate_per_s: float = 8.0,
        idempotent: bool = False,
        drain_timeout_s: float = 180.0,
        log: Any = None,
    ) -> None:
        self.workdir = workdir
        self.rng = random.Random(seed)
        self.plans = make_plans(jobs, self.rng)
        self.kills_wanted = kills
        self.rate = submit_rate_per_s
        self.idempotent = idempotent
        self.drain_timeout_s = drain_timeout_s
        self.log = log or (lambda msg: None)
        self.records = workdir / "records"
        self.records.mkdir(parents=True, exist_ok=True)
        self.server = ServerProcess(
            workdir / "state",
            "--gpus",
            str(GPUS),
            "--cpus",
            "64",
            "--kill-grace",
            "2",
            "--policy",
            "default",
            "--gpu-mem-per-gpu",
            "80G",
        )
        self.acked: dict[int, int] = {}  # plan n -> job id
        self.in_flight: set[int] = set()  # plan n whose reply was lost (not sent again)
        self.cancel_sent: set[int] = set()  # job ids a cancel may have reached
        self.cancel_replies: dict[int, int] = {}  # job id -> HTTP status of its cancel
        self.drains = 0
        self.replayed = 0  # resent submits answered with the job an earlier try made
        self.kills: list[Kill] = []
        self.problems: list[str] = []
        self._lock = threading.Lock()
        self._cancel_queue: list[tuple[float, int]] = []
        self._submitting = True
        self._chaos = True
        self._t0 = 0.0
        self._http: _Http | None = None
        self.still_running: dict[int, list[int]] = {}  # job id -> pids alive once all were final

    # -- the run ---------------------------------------------------------------------------
    def run(self) -> Report:
        self._t0 = time.monotonic()
        self._start()
        threads = [
            threading.Thread(target=self._guard, args=(fn,), name=fn.__name__, daemon=True)
            for fn in (self._submitter, self._canceller, self._drainer)
        ]
        killer = threading.Thread(target=self._guard, args=(self._killer,), daemon=True)
        for t in [*threads, killer]:
            t.start()
        try:
            threads[0].join()
            killer.join()
            self._chaos = False
            for t in threads[1:]:
                t.join()
            self._settle()
            self.still_running = self._job_processes()
        finally:
            self.server.stop()
            self.server.kill_jobs()
        report = self.check()
        report.elapsed_s = round(time.monotonic() - self._t0, 1)
        return report

    def _guard(self, fn: Any) -> None:
        try:
            fn()
        except Exception as exc:  # a rig bug must show, not hang the run
            self.problems.append(f"rig thread {fn.__name__} failed: {exc!r}")
            self._submitting = self._chaos = False

    def _elapsed(self) -> float:
        return time.monotonic() - self._t0

    def _start(self, crash_at: str | None = None) -> None:
        """(Re)start the server; a crash point that fires during the start is one more kill,
        and the server is started again without it."""
        self.server.env.pop(ENV_VAR, None)
        if crash_at:
            self.server.env[ENV_VAR] = crash_at
        try:
            self.server.start(timeout_s=60)
        except RuntimeError as exc:
            if not crash_at or "server exited" not in str(exc):
                raise
            self.kills.append(
                Kill(
                    self._elapsed(),
                    crash_at.split(":")[0],
                    "crash point",
                    "while starting (recovery)",
                )
            )
            self.server.env.pop(ENV_VAR, None)
            self.server.start(timeout_s=60)
        if self._http is None:
            token = (self.server.state_dir / "token").read_text().strip()
            self._http = _Http(self.server.port, token)

    def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        until_reply: bool = True,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any] | None:
        """One API call, sent again while the server is down (until it replies) or, with
        `until_reply` False, only while the connection is refused; None: the reply was lost."""
        assert self._http is not None
        while True:
            try:
                status, body_out = self._http.request(method, path, body, headers)
            except OSError as exc:
                if not _refused(exc) and not until_reply:
                    return None
                time.sleep(0.05)
                continue
            if status in (502, 503) or (status == 429 and until_reply):
                time.sleep(0.1)
                continue
            return status, body_out

    # -- the threads -----------------------------------------------------------------------
    def _submitter(self) -> None:
        gap_s = 1.0 / self.rate
        next_at = time.monotonic()
        for plan in self.plans:
            next_at = max(next_at + gap_s, time.monotonic() - 1.0)  # no burst after a stall
            time.sleep(max(0.0, next_at - time.monotonic()))
            self._submit(plan)
        self._submitting = False

    def _submit(self, plan: Plan) -> None:
        body: dict[str, Any] = {
            "command": [
                sys.executable,
                "-S",
                str(JOB_PROGRAM),
                str(self.records),
                str(plan.seconds),
                str(plan.exit_code),
            ],
            "name": plan.name,
            "gpus": plan.gpus,
            "priority": plan.priority,
            "preemptible": plan.preemptible,
            "workdir": str(self.records),
        }
        if plan.gpu_mem:
            body["gpu_mem"] = plan.gpu_mem
        headers = {"Idempotency-Key": plan.name} if self.idempotent else None
        got = self._call("POST", "/api/v1/jobs", body, until_reply=self.idempotent, headers=headers)
        if got is None:
            with self._lock:
                self.in_flight.add(plan.n)
            return
        status, answer = got
        if status == 200 and self.idempotent:  # a resend answered with the job it made
            with self._lock:
                self.replayed += 1
        elif status != 201:
            self.problems.append(f"submit of {plan.name} refused: HTTP {status} {answer}")
            return
        with self._lock:
            self.acked[plan.n] = int(answer["id"])
            if plan.cancel_after_s is not None:
                due = time.monotonic() + plan.cancel_after_s
                heapq.heappush(self._cancel_queue, (due, int(answer["id"])))

    def _canceller(self) -> None:
        while self._submitting or self._cancel_queue:
            with self._lock:
                due = self._cancel_queue[0] if self._cancel_queue else None
                if due is not None and due[0] <= time.monotonic():
                    heapq.heappop(self._cancel_queue)
                else:
                    due = None
            if due is None:
                time.sleep(0.05)
                continue
            job_id = due[1]
            self.cancel_sent.add(job_id)
            got = self._call("POST", f"/api/v1/jobs/{job_id}/cancel", {})
            assert got is not None
            self.cancel_replies[job_id] = got[0]

    def _drainer(self) -> None:
        while self._chaos:
            time.sleep(self.rng.uniform(1.0, 2.5))
            if not self._chaos:
                break
            gpu = self.rng.randrange(GPUS)
            now = self.rng.random() < 0.5
            self._call("POST", f"/api/v1/gpus/{gpu}/drain", {"reason": "chaos", "now": now})
            self.drains += 1
            time.sleep(self.rng.uniform(0.3, 1.0))
            self._call("POST", f"/api/v1/gpus/{gpu}/resume")

    def _killer(self) -> None:
        """`kills` kills spread over the submitting time. Every other start arms a named
        crash point (all of them in turn): that server dies there by itself, or is killed from
        outside if it has not within a few seconds; the other servers are killed from outside
        at a random moment. The last start arms nothing."""
        expected_s = len(self.plans) / self.rate
        mean_gap_s = max(0.5, expected_s / max(1, self.kills_wanted) - 1.0)
        armed_next = 0
        while len(self.kills) < self.kills_wanted and not (self.problems and not self._chaos):
            armed = self.server.env.get(ENV_VAR)
            proc = self.server.proc
            assert proc is not None
            wait_s = self.rng.uniform(0.2, 2 * mean_gap_s) + (4.0 if armed else 0.0)
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.02)
            if proc.poll() is None:
                self.server.kill9()
                note = f"{armed.split(':')[0]} not reached" if armed else ""
                self.kills.append(Kill(self._elapsed(), "random", "external", note))
            else:
                assert armed is not None, "the server died by itself"
                proc.wait()
                name, _, hits = armed.partition(":")
                self.kills.append(Kill(self._elapsed(), name, "crash point", f"hit {hits}"))
            self.log(f"kill {len(self.kills)}: {self.kills[-1]}")
            time.sleep(self.rng.uniform(0.0, 0.5))  # jobs may end while it is down
            crash_at = None
            if not armed and len(self.kills) < self.kills_wanted - 1:
                point = POINTS[armed_next % len(POINTS)]
                armed_next += 1
                crash_at = f"{point}:{self.rng.randint(1, _HITS_MAX[point])}"
            self._start(crash_at)

    def _settle(self) -> None:
        """After the chaos: every GPU back in service, every job left to reach a final
        state (the jobs cancelled and the long ones end within seconds)."""
        if self.server.proc is None or self.server.proc.poll() is not None:
            self._start()
        for gpu in range(GPUS):
            self._call("POST", f"/api/v1/gpus/{gpu}/resume")
        deadline = time.monotonic() + self.drain_timeout_s
        left = -1
        while time.monotonic() < deadline:
            left = self._unfinished()
            if left == 0:
                return
            time.sleep(0.25)
        self.problems.append(
            f"{left} job(s) not in a final state {self.drain_timeout_s:.0f} s "
            "after the last restart"
        )

    def _job_processes(self) -> dict[int, list[int]]:
        """The job processes (tests/chaos/job.py) of this run still alive, by job id."""
        found: dict[int, list[int]] = defaultdict(list)
        records = str(self.records)
        for proc in psutil.process_iter(["pid", "cmdline"]):
            argv = proc.info["cmdline"] or []
            if str(JOB_PROGRAM) in argv and records in argv:
                try:
                    job_id = int(proc.environ().get("GPUYARD_JOB_ID", "0"))
                except (psutil.Error, ValueError):
                    continue
                found[job_id].append(proc.info["pid"])
        return dict(found)

    def explain(self, job_id: int) -> str:
        """What is known of one job: its record in the database, what its runs wrote, and
        the server's log lines about it (for a problem's message: a failure on CI must say
        what happened without a rerun)."""
        with self._db() as db:
            row = db.execute(
                "SELECT state, exit_code, restarts, reason FROM jobs WHERE id = ?", (job_id,)
            ).fetchone()
        path = self.records / str(job_id)
        runs = path.read_text().strip().replace("\n", " | ") if path.exists() else "none"
        mark = f"job {job_id} "
        lines = [
            line.strip()
            for line in self.server.log.read_text(errors="replace").splitlines()
            if mark in line or f"job {job_id}:" in line
        ]
        return f"job {job_id}: db {row}; records: {runs}; server log: " + " / ".join(lines[-12:])

    def _unfinished(self) -> int:
        with self._db() as db:
            marks = ",".join("?" * len(TERMINAL))
            row = db.execute(
                f"SELECT count(*) FROM jobs WHERE state NOT IN ({marks})", sorted(TERMINAL)
            ).fetchone()
            return int(row[0])

    def _db(self) -> sqlite3.Connection:
        path = self.server.state_dir / "gpuyard.db"
        return sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)

    # -- the checks ------------------------------------------------------------------------
    def read_runs(self) -> dict[int, list[Run]]:
        runs: dict[int, list[Run]] = defaultdict(list)
        for path in self.records.iterdir():
            if not path.name.isdigit():
                continue
            job_id = int(path.name)
            open_by_pid: dict[int, Run] = {}
            for line in path.read_text().splitlines():
                kind, pid_s, t_s, *rest = line.split()
                pid, t = int(pid_s), float(t_s)
                if kind == "start":
                    gpus = () if rest[0] == "-" else tuple(int(g) for g in rest[0].split(","))
                    run = Run(job_id, pid, t, None, "open", None, gpus, int(rest[2]))
                    open_by_pid[pid] = run
                    runs[job_id].append(run)
                elif pid in open_by_pid:  # a stop before its start line: no interval known
                    run = open_by_pid.pop(pid)
                    run.end, run.how = t, kind
                    run.code = int(rest[0]) if kind == "end" else None
            runs[job_id].sort(key=lambda r: r.start)
        return dict(runs)

    def check(self) -> Report:
        rep = Report(jobs_planned=len(self.plans), idempotent_submits=self.idempotent)
        problems = list(self.problems)
        with self._db() as db:
            rows = {
                r[0]: {"name": r[1], "state": r[2], "exit_code": r[3], "restarts": r[4]}
                for r in db.execute("SELECT id, name, state, exit_code, restarts FROM jobs")
            }
        by_name: dict[str, list[int]] = defaultdict(list)
        for job_id, row in rows.items():
            by_name[row["name"]].append(job_id)
        plans = {p.n: p for p in self.plans}
        plan_of_id = {job_id: plans[n] for n, job_id in self.acked.items()}
        for n in self.in_flight:
            for job_id in by_name.get(plans[n].name, []):
                plan_of_id.setdefault(job_id, plans[n])
        rep.acknowledged = len(self.acked)
        rep.in_flight = len(self.in_flight)
        rep.in_flight_committed = sum(1 for n in self.in_flight if by_name.get(plans[n].name))

        lost = [
            f"{plans[n].name}=job {i}"
            for n, i in sorted(self.acked.items())
            if i not in rows or rows[i]["name"] != plans[n].name
        ]
        rep.lost = len(lost)
        if lost:
            problems.append(f"acknowledged but lost: {', '.join(lost[:20])}")
        dups = {name: ids for name, ids in by_name.items() if len(ids) > 1}
        rep.duplicated = sum(len(ids) - 1 for ids in dups.values())
        if dups:
            problems.append(
                "submitted once, stored more than once: "
                + ", ".join(f"{name}={ids}" for name, ids in sorted(dups.items())[:20])
            )
        phantoms = sorted(i for i in rows if i not in plan_of_id)
        if phantoms:
            problems.append(f"jobs in the database nobody submitted: {phantoms[:20]}")

        runs = self.read_runs()
        rep.runs = sum(len(r) for r in runs.values())
        rep.preempted_or_requeued_runs = sum(
            1 for rs in runs.values() for r in rs if r.how == "stop"
        )
        strays = sorted(set(runs) - set(rows))
        if strays:
            problems.append(f"jobs that ran but are not in the database: {strays[:20]}")
        opened = sorted(r.job_id for rs in runs.values() for r in rs if r.how == "open")
        if opened:
            problems.append(f"runs that never recorded their end (killed?): jobs {opened[:20]}")
            problems.extend(self.explain(job_id) for job_id in opened[:5])
        if self.still_running:
            problems.append(
                "job processes still running once every job was final: "
                + ", ".join(f"job {j} (pids {p})" for j, p in sorted(self.still_running.items()))
            )

        twice = []
        for job_id, rs in runs.items():
            for a, b in itertools.pairwise(rs):
                if a.end is not None and b.start < a.end:
                    twice.append(f"job {job_id} (pids {a.pid} and {b.pid})")
        rep.double_run = len(twice)
        if twice:
            problems.append(f"jobs that ran twice at the same time: {', '.join(twice[:20])}")

        booked = _double_booked(runs)
        rep.double_booked = len(booked)
        if booked:
            problems.append("GPUs held by two jobs at once: " + ", ".join(booked[:20]))

        wrong, not_final = [], []
        for job_id, row in sorted(rows.items()):
            plan = plan_of_id.get(job_id)
            if row["state"] not in TERMINAL:
                not_final.append(f"job {job_id} {row['state']}")
                continue
            if plan is None:
                continue
            why = _wrong_state(
                plan,
                row,
                runs.get(job_id, []),
                job_id in self.cancel_sent,
                self.cancel_replies.get(job_id),
            )
            if why:
                wrong.append(f"job {job_id} ({plan.name}): {why}")
        rep.wrong_state, rep.not_final = len(wrong), len(not_final)
        if wrong:
            problems.append("untrue final states: " + "; ".join(wrong[:20]))
        if not_final:
            problems.append("not in a final state: " + ", ".join(not_final[:20]))

        rep.replayed = self.replayed
        rep.cancels = len(self.cancel_sent)
        rep.drains = self.drains
        rep.kills = list(self.kills)
        rep.kills_survived = len(self.kills)
        rep.kills_by_point = dict(Counter(k.point for k in self.kills))
        rep.problems = problems
        return rep


def _wrong_state(
    plan: Plan, row: dict[str, Any], runs: list[Run], cancel_sent: bool, cancel_reply: int | None
) -> str | None:
    """Why the job's final state or exit code is untrue (None: it is true)."""
    state, code = row["state"], row["exit_code"]
    last = runs[-1] if runs else None
    if plan.cancel_after_s is not None and cancel_reply == 200:
        return None if state == "CANCELLED" else f"cancelled (200), but {state}"
    if state == "CANCELLED":
        return None if cancel_sent else "CANCELLED, but nobody cancelled it"
    expected = "COMPLETED" if plan.exit_code == 0 else "FAILED"
    if state != expected:
        return f"{state} (exit {code}), planned exit {plan.exit_code}"
    if code != plan.exit_code:
        return f"{state} with exit code {code}, planned {plan.exit_code}"
    if last is None or last.how != "end" or last.code != plan.exit_code:
        return f"{state}, but its last run did not run to its end ({last and last.how})"
    return None


def _double_booked(runs: dict[int, list[Run]]) -> list[str]:
    """Pairs of jobs that held one GPU at the same time: a whole-GPU job with anyone, or
    shared (--gpu-mem) jobs whose memory together passed the GPU's."""
    per_gpu: dict[int, list[Run]] = defaultdict(list)
    for rs in runs.values():
        for r in rs:
            if r.end is not None:
                for g in r.gpus:
                    per_gpu[g].append(r)
    found = []
    for gpu, rs in sorted(per_gpu.items()):
        rs.sort(key=lambda r: r.start)
        active: list[Run] = []
        for r in rs:
            active = [a for a in active if a.end is not None and a.end > r.start]
            others = [a for a in active if a.job_id != r.job_id]
            whole = r.gpu_mem_mib == 0 or any(a.gpu_mem_mib == 0 for a in others)
            shared_mib = r.gpu_mem_mib + sum(a.gpu_mem_mib for a in others)
            if others and (whole or shared_mib > GPU_MEM_MIB):
                found.extend(f"GPU {gpu}: jobs {a.job_id} and {r.job_id}" for a in others)
            active.append(r)
    return found
