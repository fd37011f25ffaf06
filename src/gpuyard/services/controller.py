"""The controller loop: load a view, let the scheduler decide, apply durably, then act.

`tick()` runs when a submit, an exit or a cancel wakes it, and on a slow periodic timer;
tests call it directly.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from gpuyard.domain.job import REASON_NONE, Job
from gpuyard.domain.outcome import judge_exit
from gpuyard.domain.states import JobState
from gpuyard.scheduling.plan import NodeFree, Plan, SchedulingView, plan
from gpuyard.services.inventory import Inventory
from gpuyard.services.job_env import build_job_env
from gpuyard.services.jobbook import JobBook
from gpuyard.services.ports import Executor, ExitStatus, JobStore, Launched

log = logging.getLogger("gpuyard.controller")


class Controller:
    """Owns every state change of a started job: start, pid record, stop, end."""

    def __init__(
        self,
        book: JobBook,
        store: JobStore,
        executor: Executor,
        inventory: Inventory,
        *,
        base_env: Mapping[str, str],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.book = book
        self.store = store
        self.executor = executor
        self.inventory = inventory
        self._base_env = dict(base_env)
        self._clock = clock
        self._last_plan = Plan()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- loop -----------------------------------------------------------------------------
    def wake(self) -> None:
        self._wake.set()

    def start(self, period_s: float = 1.0) -> None:
        self._thread = threading.Thread(
            target=self._run, args=(period_s,), name="gpuyard-controller", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self, period_s: float) -> None:
        while not self._stop.is_set():
            self._wake.wait(period_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.tick()
            except Exception:  # the loop must outlive one bad pass; the next retries
                log.exception("scheduling pass failed")

    # -- one pass -------------------------------------------------------------------------
    def tick(self) -> Plan:
        """One scheduling pass: decide, record the starts durably, then launch them."""
        with self.book.mutation_lock:
            decided = plan(self._view())
            self._last_plan = decided
            started = self._record_starts(decided)
        if started:
            self._launch(started)
        return decided

    def reason_for(self, job: Job) -> str:
        """Why a job is in its state: the last pass's reason for pending jobs."""
        if job.state is JobState.PENDING:
            return self._last_plan.reason_for(job.id)
        return job.reason

    def _view(self) -> SchedulingView:
        pending, by_gpus = self.book.pending_in_order()
        held: set[int] = set()
        cpus = self.inventory.node.cpus
        mem = self.inventory.node.mem_mib
        for job in self.book.running():
            held.update(job.gpus)
            cpus -= job.spec.cpus
            mem -= job.spec.mem_mib
        free = [g for g in self.inventory.gpu_indices() if g not in held]
        node = NodeFree(self.inventory.node.name, free, cpus, mem)
        return SchedulingView(pending=pending, nodes=[node], pending_by_gpus=by_gpus)

    def _record_starts(self, decided: Plan) -> list[Job]:
        now = self._clock()
        started = []
        for start in decided.starts:
            job = self.book.get(start.job_id)
            if job is None or job.state is not JobState.PENDING:
                continue
            started.append(
                job.transition(
                    JobState.RUNNING,
                    gpus=start.gpus,
                    node=start.node,
                    started_at=now,
                    reason=REASON_NONE,
                )
            )
        if started:
            # Durable before any process starts: a crash now re-adopts or requeues, never
            # runs a job twice.
            self.store.write([], started)
            for job in started:
                self.book.put(job)
        return started

    def _launch(self, started: list[Job]) -> None:
        launched: list[tuple[Job, Launched]] = []
        for job in started:
            try:
                launched.append(
                    (job, self.executor.launch(job, build_job_env(job, self._base_env)))
                )
            except Exception as exc:  # the job cannot start; it must not stay RUNNING
                log.warning("job %s could not start: %s", job.id, exc)
                self._finish(job.id, ExitStatus(exit_code=None, lost=True), f"LaunchFailed: {exc}")
        with self.book.mutation_lock:
            recorded = []
            for job, proc in launched:
                current = self.book.get(job.id)
                if current is None or current.state is not JobState.RUNNING:
                    continue
                recorded.append(current.with_changes(pid=proc.pid, pid_started_at=proc.started_at))
            self.store.write([], recorded)
            for job in recorded:
                self.book.put(job)
        for job in recorded:
            if job.stop_intent is not None:
                self.executor.stop(job)
            self.executor.watch(job)

    # -- ends -----------------------------------------------------------------------------
    def on_exit(self, job_id: int, status: ExitStatus) -> None:
        """Called by the executor when a job's supervisor has ended."""
        self._finish(job_id, status, None)
        self.wake()

    def _finish(self, job_id: int, status: ExitStatus, reason: str | None) -> None:
        with self.book.mutation_lock:
            job = self.book.get(job_id)
            if job is None or job.state is not JobState.RUNNING:
                return
            state, exit_code, judged = judge_exit(
                job, status.exit_code, status.signal, status.timed_out, status.lost
            )
            ended = job.transition(
                state,
                exit_code=exit_code,
                ended_at=status.ended_at or self._clock(),
                reason=reason or judged,
            )
            self.store.write([], [ended])
            self.book.put(ended)
        log.info("job %s %s%s", job_id, ended.state.value,
                 "" if ended.reason == REASON_NONE else f" ({ended.reason})")  # fmt: skip

    def request_stop(self, job: Job, intent: JobState) -> Job:
        """Record why a running job is being stopped, then signal it (caller holds no lock)."""
        with self.book.mutation_lock:
            current = self.book.get(job.id)
            if current is None or current.state is not JobState.RUNNING:
                return current or job
            if current.stop_intent is None:
                current = current.with_changes(stop_intent=intent)
                self.store.write([], [current])
                self.book.put(current)
        if current.pid is not None:
            self.executor.stop(current)
        return current

    # -- restart --------------------------------------------------------------------------
    def recover(self) -> None:
        """Re-adopt jobs that kept running while the server was down; settle the rest."""
        for job in self.book.running():
            found = self.executor.recover(job)
            if found.ended is not None:
                self._finish(job.id, found.ended, None)
            elif found.never_started and job.stop_intent is JobState.CANCELLED:
                self._finish(job.id, ExitStatus(exit_code=None), None)  # cancelled before it ran
            elif found.never_started:
                self._requeue(job)
            elif found.alive is not None:
                self._adopt(job, found.alive)

    def _adopt(self, job: Job, alive: Launched) -> None:
        with self.book.mutation_lock:
            current = self.book.get(job.id)
            assert current is not None
            if current.pid != alive.pid:
                current = current.with_changes(pid=alive.pid, pid_started_at=alive.started_at)
                self.store.write([], [current])
                self.book.put(current)
        log.info("job %s re-adopted (pid %s)", job.id, alive.pid)
        if current.stop_intent is not None:
            self.executor.stop(current)
        self.executor.watch(current)

    def _requeue(self, job: Job) -> None:
        with self.book.mutation_lock:
            current = self.book.get(job.id)
            assert current is not None
            requeued = current.transition(
                JobState.PENDING, gpus=(), started_at=None, pid=None, pid_started_at=None,
                stop_intent=None,
            )  # fmt: skip
            self.store.write([], [requeued])
            self.book.put(requeued)
        log.info("job %s requeued: it had not started when the server stopped", job.id)
