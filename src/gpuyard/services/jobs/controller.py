"""The controller loop: load a view, let the scheduler decide, apply durably, then act.

`tick()` runs when a submit, an exit or a cancel wakes it, and on a slow periodic timer;
tests call it directly.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping

from gpuyard.domain.errors import StateDiskFull
from gpuyard.domain.job import REASON_NONE, Job
from gpuyard.domain.outcome import judge_exit
from gpuyard.domain.retry import (
    REASON_LAUNCH_FAILED,
    REASON_UNHEALTHY,
    RetryRules,
    attempt_of,
    requeue,
    settle_end,
    settle_service_end,
)
from gpuyard.domain.states import JobState
from gpuyard.domain.units import format_size_mib
from gpuyard.services.jobs.crashpoints import crash_point
from gpuyard.services.jobs.dependencies import note_never_satisfied
from gpuyard.services.jobs.disk_waits import DiskFullWaits
from gpuyard.services.jobs.journal import Journal, Transaction
from gpuyard.services.launch.oom import oom_line
from gpuyard.services.launch.plan import launch_plan, needs_port, rank_failure
from gpuyard.services.launch.rendezvous import RendezvousPorts
from gpuyard.services.launch.run_as import RunAsPolicy
from gpuyard.services.metrics import QueueMetrics
from gpuyard.services.ports import Executor, ExitStatus, Launched, NodeLost
from gpuyard.services.scheduler.inventory import Inventory
from gpuyard.services.scheduler.live import Decisions, Launch, LiveScheduler

log = logging.getLogger("gpuyard.controller")

_MIN_WAIT_S = 0.02  # the shortest sleep between ticks when a pass is due (no busy loop)


class Wakeup:
    """Wakes the controller loop at once (a submit, an exit, a cancel, a drain): made before
    the controller, so that the journal's observers and other services can hold it."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def __call__(self, *_: object) -> None:
        self._event.set()

    def wait(self, timeout_s: float) -> None:
        self._event.wait(timeout_s)
        self._event.clear()


class ExitInbox:
    """Ends reported by the executor's watch thread, handled by the controller's next tick (the
    executor is built before the controller and only needs this inbox, not the controller)."""

    def __init__(self, wakeup: Wakeup) -> None:
        self._exits: deque[tuple[int, ExitStatus]] = deque()
        self._wakeup = wakeup

    def __call__(self, job_id: int, status: ExitStatus) -> None:
        self._exits.append((job_id, status))
        self._wakeup()

    def take(self) -> list[tuple[int, ExitStatus]]:
        taken = []
        while self._exits:
            taken.append(self._exits.popleft())
        return taken


class Controller:
    """Owns every state change of a started job: start, pid record, end, restart recovery.
    Each change goes through the journal (durable, then the book, then observers)."""

    def __init__(
        self,
        journal: Journal,
        executor: Executor,
        inventory: Inventory,
        scheduler: LiveScheduler,
        ports: RendezvousPorts,
        *,
        base_env: Mapping[str, str],
        wakeup: Wakeup,
        exits: ExitInbox,
        clock: Callable[[], float] = time.time,
        metrics: QueueMetrics | None = None,
        gpu_peak_mib: Callable[[int], int | None] = lambda job_id: None,
        identities: RunAsPolicy | None = None,
        retry_rules: RetryRules | None = None,
    ) -> None:
        self.journal = journal
        self.book = journal.book
        self.executor = executor
        self.inventory = inventory
        self.scheduler = scheduler
        self._ports = ports
        self._gpu_peak_mib = gpu_peak_mib  # a job's peak GPU memory, when telemetry knows it
        self._identities = identities  # as whom each job runs (None: as the server, as is)
        self._retry_rules = retry_rules or RetryRules()  # backoff, NODE_FAIL requeue limit
        self._woke_for: float | None = None  # the scheduler's pass time the loop last woke for
        self._base_env = dict(base_env)
        self._clock = clock
        self.metrics = metrics or QueueMetrics()
        self._wakeup = wakeup
        self._exits = exits
        self._disk_waits = DiskFullWaits(journal, scheduler.gate, clock=clock)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- loop -----------------------------------------------------------------------------
    def wake(self) -> None:
        self._wakeup()

    def start(self, period_s: float = 1.0) -> None:
        self._thread = threading.Thread(
            target=self._run, args=(period_s,), name="gpuyard-controller", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wakeup()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self, period_s: float) -> None:
        while not self._stop.is_set():
            self._wakeup.wait(self._wait_s(period_s))
            if self._stop.is_set():
                return
            try:
                self.tick()
            except Exception:  # the loop must outlive one bad pass; the next retries
                log.exception("scheduling pass failed")

    def _wait_s(self, period_s: float) -> float:
        """Until the next tick: the period, or sooner when the scheduler asked for a pass
        then (a retry's backoff ending, a policy's timer); never a busy loop."""
        due, now = self.scheduler.next_pass_at, self._clock()
        if due is None or (due <= now and due == self._woke_for):
            return period_s  # a time a pass has been woken for already: the period, no spin
        self._woke_for = due
        return min(period_s, max(_MIN_WAIT_S, due - now))

    # -- one pass -------------------------------------------------------------------------
    def tick(self) -> Decisions:
        """One scheduling pass: changes whose write failed are retried; the policy decides;
        starts and preemptions are recorded durably, then processes are launched (the
        journal's observers signal the preempted ones)."""
        began = time.perf_counter()
        for job_id, status in self._exits.take():
            self._finish(job_id, status, None)
        self.journal.retry_unwritten()
        self._disk_waits.release_due()
        with self.journal.transaction() as tx:
            decided = self.scheduler.decide()
            crash_point("pass_decided")
            started = self._record_starts(tx, decided.launches)
            self._record_preemptions(tx, decided.preempt)
        if started:
            crash_point("start_recorded")
            self._launch(started)
        note_never_satisfied(decided.never)  # they stay pending (DependencyNeverSatisfied)
        if decided.passed:  # idle ticks would drown the passes in the histogram
            self.metrics.pass_s.observe(time.perf_counter() - began)
        return decided

    def _record_starts(self, tx: Transaction, launches: list[Launch]) -> list[Job]:
        now = self._clock()
        starts = []
        for launch in launches:
            job = tx.current(launch.job_id)
            if job is None or job.state is not JobState.PENDING:
                continue  # a preempted job whose old processes are still stopping
            started = job.transition(
                JobState.RUNNING, gpus=launch.gpus, node=launch.node, started_at=now,
                reason=REASON_NONE,
            )  # fmt: skip
            starts.append(started)
        # Durable before any process starts: a crash now re-adopts or requeues, never runs a
        # job twice. A start that cannot be written is not made: the scheduler offers it again.
        return tx.commit(starts, now, retry=False)

    def _record_preemptions(self, tx: Transaction, job_ids: list[int]) -> None:
        """Mark preempted jobs (stop intent PENDING: they are requeued once stopped); a write
        that fails is retried by the journal, and the stop is signalled once it lands."""
        stopping = []
        for job_id in job_ids:
            job = tx.current(job_id)
            if job is None or job.state is not JobState.RUNNING or job.stop_intent is not None:
                continue
            stopping.append(job.with_changes(stop_intent=JobState.PENDING))
            log.info("job %s preempted: it will be requeued once stopped", job_id)
        tx.commit(stopping, self._clock())
        crash_point("preempt_recorded")
        self.scheduler.stops_recorded(job_ids)

    def _launch(self, started: list[Job]) -> None:
        launched: list[tuple[Job, Launched]] = []
        for job in started:
            try:
                port = self._ports.take(job.id) if needs_port(job.spec) else None
                # Looked up again at launch: a user removed since the submit fails the job here.
                who = self._identities.for_owner(job.owner) if self._identities else None
                plan = launch_plan(
                    job, self._base_env, self.inventory.gpu_mem_mib(), port,
                    self.executor.log_path(job.id), who, self.inventory.container_runtime,
                    self.inventory.gpus,
                )  # fmt: skip
                launched.append((job, self.executor.launch(job, plan)))
            except StateDiskFull as exc:  # nothing started: it waits for space, never fails
                self._disk_waits.not_launched(job, exc)
            except NodeLost as exc:  # its machine is gone (Ray backend)
                log.warning("job %s could not start: %s", job.id, exc)
                lost = ExitStatus(exit_code=None, node_lost=True, reason=f"NodeLost: {exc}")
                self._finish(job.id, lost, None)
            except Exception as exc:  # the job cannot start; it must not stay RUNNING
                log.warning("job %s could not start: %s", job.id, exc)
                failed = ExitStatus(exit_code=None, lost=True)
                self._finish(job.id, failed, f"{REASON_LAUNCH_FAILED}: {exc}")
        crash_point("launched")
        now = self._clock()
        for job, proc in launched:

            def record_pid(current: Job, proc: Launched = proc) -> Job | None:
                if current.state is not JobState.RUNNING:
                    return None
                return current.with_changes(pid=proc.pid, pid_started_at=proc.started_at)

            # Watched even if the pid record waits for a retry: its end must be seen.
            recorded = self.journal.change(job.id, record_pid, now)
            if recorded is not None and recorded.pid == proc.pid:
                self.executor.watch(recorded)

    # -- ends -----------------------------------------------------------------------------
    def on_exit(self, job_id: int, status: ExitStatus) -> None:
        """A job's supervisor has ended (recorded now, on the caller's thread)."""
        self._finish(job_id, status, None)
        self.wake()

    def _finish(self, job_id: int, status: ExitStatus, reason: str | None) -> None:
        job = self.journal.current(job_id)
        if job is None or job.state is not JobState.RUNNING:
            return
        # The log is read before the lock is taken: no I/O while changes wait.
        tail = _log_tail(self.executor.log_path(job_id)) if status.exit_code != 0 else ""
        ended_at = status.ended_at or self._clock()

        def end(current: Job) -> Job | None:
            if current.state is not JobState.RUNNING:
                return None
            ended = self._ended(current, status, reason, tail, ended_at)
            if status.max_rss_kib is not None or status.cpu_time_s is not None:
                ended = dataclasses.replace(
                    ended, max_rss_kib=status.max_rss_kib, cpu_time_s=status.cpu_time_s
                )
            if status.steps or current.steps:  # this run's srun steps (an earlier run's go)
                ended = dataclasses.replace(ended, steps=status.steps)
            if status.log_dropped_bytes:  # the log's disk was full: what this run's log lost
                lost = min(current.log_dropped_bytes + status.log_dropped_bytes, 2**31 - 1)
                ended = dataclasses.replace(ended, log_dropped_bytes=lost)
            return ended

        ended = self.journal.change(job_id, end, ended_at)
        if ended is not None and ended.state is not JobState.RUNNING:
            # What landed, not what was meant: an end whose write failed is said to wait.
            waits = self.journal.is_unwritten(job_id)
            log.info("job %s %s%s%s", job_id, ended.state.value,
                     "" if ended.reason == REASON_NONE else f" ({ended.reason})",
                     "; not recorded yet: its write is retried" if waits else "")  # fmt: skip

    def _ended(
        self, job: Job, status: ExitStatus, reason: str | None, tail: str, ended_at: float
    ) -> Job:
        state, exit_code, judged = judge_exit(
            job, status.exit_code, status.signal, status.timed_out, status.lost,
            status.stop_requested,
        )  # fmt: skip
        if status.node_lost and state is not JobState.CANCELLED:
            state, reason = JobState.NODE_FAIL, status.reason
        elif status.out_of_memory and state is JobState.FAILED and not reason:
            state, reason = JobState.OUT_OF_MEMORY, status.reason  # host RAM, not a GPU's
        if status.reason and state is JobState.FAILED and not reason:
            judged = status.reason
        if state is JobState.FAILED and not reason:
            state, reason = self._diagnose(job, judged, tail, exit_code)
        if job.spec.kind == "service":  # restarted after any end but a cancel or its limit
            if state is JobState.PENDING and job.reason.startswith(REASON_UNHEALTHY):
                state, reason = JobState.FAILED, job.reason  # stopped by its health check
            if state is not JobState.PENDING:
                return settle_service_end(
                    job, state, exit_code, reason or judged, ended_at, self._retry_rules
                )
        if state is JobState.PENDING:  # preempted or requeued: the run is kept as an attempt
            why = job.reason if job.reason != REASON_NONE else judged
            run = attempt_of(job, state, None, why, ended_at)
            return requeue(job, run, ended_at, judged)
        # A drain's stop (NODE_FAIL intent) took its GPUs out of service first; a machine the
        # executor found lost under the job may not be out of service yet.
        drained = job.stop_intent is JobState.NODE_FAIL
        return settle_end(
            job, state, exit_code, reason or judged, ended_at, self._retry_rules,
            out_of_service=drained,
        )  # fmt: skip

    def _diagnose(
        self, job: Job, judged: str, tail: str, exit_code: int | None
    ) -> tuple[JobState, str | None]:
        """A failed job's log tail says more than its exit code: a command that could not
        start (retried only when asked), GPU out-of-memory (its own state), or which torchrun
        rank failed."""
        cannot = _cannot_run(tail) if exit_code == _EXIT_CANNOT_RUN else None
        if cannot is not None:
            return JobState.FAILED, f"{REASON_LAUNCH_FAILED}: {cannot}"
        rank = rank_failure(tail) if job.spec.distributed == "torchrun" else None
        oom = oom_line(tail)
        if oom is None:
            return JobState.FAILED, rank
        peak = self._gpu_peak_mib(job.id)
        seen = f"; its peak GPU memory was {format_size_mib(peak)}" if peak else ""
        if job.spec.gpu_mem_mib:  # its allocator was capped below --gpu-mem
            limit = format_size_mib(job.spec.gpu_mem_mib)
            return JobState.OUT_OF_MEMORY, (
                f"OutOfMemory: the job reached its --gpu-mem {limit} per GPU ({oom}){seen}; "
                f"ask for more --gpu-mem, or use a smaller batch ({rank or judged})"
            )
        return JobState.OUT_OF_MEMORY, (
            f"OutOfMemory: the job ran out of GPU memory ({oom}){seen}; use a smaller batch "
            f"or model per GPU, or more GPUs ({rank or judged})"
        )

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
        def record_pid(current: Job) -> Job | None:
            if current.pid == alive.pid:
                return None
            return current.with_changes(pid=alive.pid, pid_started_at=alive.started_at)

        current = self.journal.change(job.id, record_pid, self._clock()) or job
        log.info("job %s re-adopted (pid %s)", job.id, alive.pid)
        if current.stop_intent is not None:
            self.executor.stop(current)
        self.executor.watch(current)

    def _requeue(self, job: Job) -> None:
        def requeue(current: Job) -> Job | None:
            return current.transition(
                JobState.PENDING, gpus=(), started_at=None, pid=None, pid_started_at=None,
                stop_intent=None,
            )  # fmt: skip

        self.journal.change(job.id, requeue, self._clock())
        log.info("job %s requeued: it had not started when the server stopped", job.id)


_EXIT_CANNOT_RUN = 127  # the supervisor's exit when the job's exec (or cgroup join) fails
_CANNOT_RUN = "gpuyard: cannot run "  # the line it writes to the job's log then


def _cannot_run(tail: str) -> str | None:
    """What the supervisor said when the job's command could not be started, if it did."""
    for line in reversed(tail.splitlines()):
        if line.startswith(_CANNOT_RUN):
            return line.removeprefix("gpuyard: ").strip()
    return None


def _log_tail(path: str, size: int = 16_384) -> str:
    """The end of a job's log (where torchrun prints its failure summary)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - size))
            return f.read().decode(errors="replace")
    except OSError:
        return ""
