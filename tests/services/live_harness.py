"""The live server's decision path (Controller, LiveScheduler, the job use cases, JobBook, a
real SQLite store) driven in simulated time, so that its decisions can be compared with the
simulator's.

Only the executor is replaced: `SimulatedProcesses` runs each job for its trace duration in
simulated time and ends a stopped job at once (as SIGTERM does to a job that checkpoints and
exits). The real executor's stop, grace and kill are tested in tests/e2e with real processes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuyard.adapters.store.sql import SqlJobStore, sqlite_url
from gpuyard.bootstrap import build_core
from gpuyard.domain.job import Gpu, Job, JobSpec, NodeCapacity
from gpuyard.domain.principal import Principal
from gpuyard.domain.states import JobState
from gpuyard.scheduling.policy import Context, Policy, SchedJob
from gpuyard.services.ports import ExitStatus, Launched, LaunchPlan, Recovered
from gpuyard.services.scheduler.inventory import Inventory
from gpuyard.settings import Settings
from gpuyard.simulation.trace import TraceJob

Event = tuple[str, float, int]


class Recording:
    """A policy wrapper that records every event the policy is fed, in order."""

    def __init__(self, policy: Policy) -> None:
        self._policy = policy
        self.events: list[Event] = []
        self.name = policy.name
        self.preemptive = policy.preemptive

    def __getattr__(self, name: str) -> Any:
        return getattr(self._policy, name)

    def _record(self, kind: str, job: SchedJob, now: float) -> None:
        self.events.append((kind, round(now, 6), job.id))

    def submit(self, job: SchedJob, now: float) -> None:
        self._record("submit", job, now)
        self._policy.submit(job, now)

    def started(self, job: SchedJob, now: float) -> None:
        self._record("started", job, now)
        self._policy.started(job, now)

    def preempted(self, job: SchedJob, now: float) -> None:
        self._record("preempted", job, now)
        self._policy.preempted(job, now)

    def finished(self, job: SchedJob, now: float) -> None:
        self._record("finished", job, now)
        self._policy.finished(job, now)

    def cancel(self, job: SchedJob, now: float) -> None:
        self._record("cancel", job, now)
        self._policy.cancel(job, now)

    def schedule(self, ctx: Context) -> None:
        self._policy.schedule(ctx)

    def pending(self, now: float) -> list[SchedJob]:
        return self._policy.pending(now)

    def next_decision_at(self, now: float) -> float | None:
        return self._policy.next_decision_at(now)


class SimulatedProcesses:
    """An Executor whose jobs need `work_s[job id]` seconds of simulated time to complete."""

    binds_devices = True

    def __init__(self, work_s: dict[int, float], clock: Callable[[], float]) -> None:
        self.work_s = dict(work_s)
        self.clock = clock
        self.on_exit: Callable[[int, ExitStatus], None] | None = None
        self.runs: dict[int, float] = {}  # job id -> start of the current run
        self.limit_s: dict[int, float] = {}  # job id -> its time limit: a run ends there
        self.envs: dict[int, list[dict[str, str]]] = {}
        self.stops: list[int] = []
        self.removed: list[int] = []  # job folders `clean` removed

    def launch(self, job: Job, plan: LaunchPlan) -> Launched:
        self.runs[job.id] = self.clock()
        if job.spec.time_limit_s:
            self.limit_s[job.id] = float(job.spec.time_limit_s)
        self.envs.setdefault(job.id, []).append(dict(plan.env))
        return Launched(pid=100_000 + job.id, started_at=self.clock())

    def stop(self, job: Job, stop_signal: int | None = None) -> None:
        now = self.clock()
        self.stops.append(job.id)
        self.work_s[job.id] -= now - self.runs.pop(job.id)
        assert self.on_exit is not None
        self.on_exit(job.id, ExitStatus(exit_code=None, signal=15, ended_at=now))

    def _run_s(self, job_id: int) -> float:
        """How long the current run lasts: the work left, or the time limit (as the real
        supervisor kills a run at its limit)."""
        return min(self.work_s[job_id], self.limit_s.get(job_id, math.inf))

    def next_end(self) -> float:
        return min((t + self._run_s(i) for i, t in self.runs.items()), default=math.inf)

    def end_due(self) -> None:
        """End the runs due by now: by end time, ties in the order they were launched (`runs`
        keeps launch order), as the simulator's event queue orders ends scheduled at their
        starts. By job id instead, two runs ending at one instant reached the policy in the
        other order than simulated (its history then kept other runs)."""
        now = self.clock()
        ends = [(t + self._run_s(i), n, i) for n, (i, t) in enumerate(self.runs.items())]
        for _, _, job_id in sorted(end for end in ends if end[0] <= now):
            del self.runs[job_id]
            assert self.on_exit is not None
            if self.work_s[job_id] > self.limit_s.get(job_id, math.inf):
                self.on_exit(job_id, ExitStatus(None, signal=9, timed_out=True, ended_at=now))
            else:
                self.on_exit(job_id, ExitStatus(exit_code=0, ended_at=now))

    def watch(self, job: Job) -> None:
        pass

    def recover(self, job: Job) -> Recovered:
        return Recovered(never_started=True)

    def log_path(self, job_id: int) -> str:
        return f"/nonexistent/{job_id}.log"

    def remove_files(self, job_id: int) -> None:
        self.removed.append(job_id)

    def close(self) -> None:
        pass


class LiveRig:
    """One live server's decision path on a SQLite file, in simulated time: the server's own
    wiring (`bootstrap.build_core`), with simulated processes for an executor."""

    def __init__(
        self,
        tmp_path: Path,
        policy: Policy,
        gpus: int,
        work_s: dict[int, float] | None = None,
        settings: Settings | None = None,
    ) -> None:
        self.now = 0.0
        tmp_path.mkdir(parents=True, exist_ok=True)
        self.store = SqlJobStore(sqlite_url(tmp_path / "gpuyard.db"))
        gpu_list = tuple(Gpu(i, f"GPU-{i}", "declared", None, False) for i in range(gpus))
        node = NodeCapacity("node0", cpus=10_000, mem_mib=10**9)
        self.inventory = Inventory(gpu_list, node, "declared")
        self.policy = policy
        self.processes = SimulatedProcesses(work_s or {}, self.clock)

        def executor(exits: Callable[[int, ExitStatus], None]) -> SimulatedProcesses:
            self.processes.on_exit = exits
            return self.processes

        core = build_core(
            self.store.stores(), self.inventory, policy, executor, settings=settings or Settings(),
            clock=self.clock, base_env={},
        )  # fmt: skip
        self.book, self.scheduler = core.book, core.scheduler
        self.controller, self.journal = core.controller, core.journal
        self.submits, self.reads, self.verbs = core.submits, core.reads, core.verbs
        self.gpus, self.limits, self.stops = core.gpus, core.limits, core.desk.stops
        self.health = core.health  # services' health checks (a test may give its own)
        self.feed, self.drains, self.events = core.feed, core.drains, core.events
        self.notify = core.notify  # webhooks (its thread not started: tests call step())
        self.actor = Principal("ada", role="admin")

    def clock(self) -> float:
        return self.now

    def submit(self, work_s: float, *, user: str = "ada", **spec: Any) -> Job:
        job_spec = JobSpec(**{"argv": ("train",), "name": "t", "workdir": "/", **spec})
        job = self.submits.submit(job_spec, Principal(user))
        self.processes.work_s[job.id] = work_s
        return job

    def settle(self) -> None:
        """Deliver the ends due now and run passes until nothing more happens at this instant
        (a job chosen over a preempted one launches on the pass after the victim stopped)."""
        self.processes.end_due()
        for _ in range(3):
            self.controller.tick()

    def advance(self, to: float) -> None:
        self.now = to
        self.settle()

    def _startable(self) -> bool:
        never = "DependencyNeverSatisfied"
        return any(self.reads.reason(j) != never for j in self.book.jobs(include_finished=False))

    def next_time(self) -> float:
        wake = self.scheduler.next_pass_at
        wake = wake if wake is not None and wake > self.now else math.inf
        return min(self.processes.next_end(), wake)

    def replay(self, trace: list[TraceJob], submit: Callable[[list[TraceJob]], object]) -> None:
        """Run ``trace`` (by ``submitted_at``) to its end in simulated time: at each arrival's
        time ``submit`` takes it (with any arrivals it brings along: an array's tasks) off the
        front of the list and submits it; the rig settles after each instant, until no job is
        left but those whose dependency can never hold (pending for good, as Slurm leaves them:
        `gpuyard simulate` cancels them)."""
        arrivals = list(trace)
        while arrivals or self.processes.runs or self._startable():
            at = min(arrivals[0].submitted_at if arrivals else math.inf, self.next_time())
            assert at < math.inf, "jobs left that nothing will ever start"
            self.now = at
            while arrivals and arrivals[0].submitted_at == at:
                submit(arrivals)
            self.settle()

    def job(self, job_id: int) -> Job:
        return self.reads.get(job_id, self.actor)

    def state(self, job_id: int) -> JobState:
        return self.job(job_id).state

    def close(self) -> None:
        self.store.close()
