"""The controller loop: load a view, let the scheduler decide, apply durably, then act.

`tick()` runs when a submit, an exit or a cancel wakes it, and on a slow periodic timer;
tests call it directly.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from gpuyard.domain.job import REASON_NONE, Drain, Job
from gpuyard.domain.outcome import judge_exit
from gpuyard.domain.states import JobState
from gpuyard.domain.units import format_size_mib
from gpuyard.services.inventory import Inventory
from gpuyard.services.job_env import build_job_env
from gpuyard.services.jobbook import JobBook
from gpuyard.services.launch import job_process, rank_failure
from gpuyard.services.live_scheduler import Decisions, Launch, LiveScheduler
from gpuyard.services.metrics import QueueMetrics
from gpuyard.services.oom import oom_line
from gpuyard.services.ports import Executor, ExitStatus, JobStore, Launched
from gpuyard.services.rendezvous import RendezvousPorts

log = logging.getLogger("gpuyard.controller")

# A job already ending for good (cancelled, or failed with its GPU) keeps that end.
_FINAL_INTENTS = frozenset({JobState.CANCELLED, JobState.NODE_FAIL, JobState.OUT_OF_MEMORY})


class Controller:
    """Owns every state change of a started job: start, pid record, stop, end."""

    def __init__(
        self,
        book: JobBook,
        store: JobStore,
        executor: Executor,
        inventory: Inventory,
        scheduler: LiveScheduler,
        *,
        base_env: Mapping[str, str],
        clock: Callable[[], float] = time.time,
        metrics: QueueMetrics | None = None,
    ) -> None:
        self.book = book
        self.store = store
        self.executor = executor
        self.inventory = inventory
        self.scheduler = scheduler
        self.drains: dict[int, Drain] = dict(store.load_drains())  # GPUs out of service
        for gpu_index, drain in self.drains.items():
            scheduler.drained(gpu_index, True, drain.drained_at)
        self._ports = RendezvousPorts()
        # A job's peak GPU memory in MiB, when telemetry knows it (bootstrap wires it in).
        self.gpu_peak_mib: Callable[[int], int | None] = lambda job_id: None
        # Called (outside any lock) once a job has ended for good: bootstrap saves its GPU stats.
        self.on_ended: Callable[[Job], object] = lambda job: None
        self._base_env = dict(base_env)
        self._clock = clock
        self.metrics = metrics or QueueMetrics()
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
    def tick(self) -> Decisions:
        """One scheduling pass: the policy decides; starts and preemptions are recorded durably,
        then processes are launched and stopped."""
        began = time.perf_counter()
        with self.book.mutation_lock:
            decided = self.scheduler.decide()
            started = self._record_starts(decided.launches)
            stopping = self._record_preemptions(decided.preempt)
        if started:
            self._launch(started)
        for job in stopping:
            if job.pid is not None:  # else `_launch` stops it once its pid is known
                self.executor.stop(job)
        if decided.passed:  # idle ticks would drown the passes in the histogram
            self.metrics.pass_s.observe(time.perf_counter() - began)
        return decided

    def reason_for(self, job: Job) -> str:
        """Why a job is in its state: the scheduler's reason for pending jobs."""
        if job.state is JobState.PENDING:
            return self.scheduler.reason_for(job.id)
        return job.reason

    def _record_starts(self, launches: list[Launch]) -> list[Job]:
        now = self._clock()
        started = []
        for launch in launches:
            job = self.book.get(launch.job_id)
            if job is None or job.state is not JobState.PENDING:
                continue  # a preempted job whose old processes are still stopping
            started.append(
                job.transition(
                    JobState.RUNNING,
                    gpus=launch.gpus,
                    node=launch.node,
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
                self.scheduler.launched(job.id, job.gpus)
                if job.restarts == 0:  # the wait users feel: submit to first start
                    self.metrics.submit_to_start_s.observe(max(0.0, now - job.submitted_at))
        return started

    def _record_preemptions(self, job_ids: list[int]) -> list[Job]:
        """Mark preempted jobs durably (stop intent PENDING: they are requeued once stopped)."""
        stopping = []
        for job_id in job_ids:
            job = self.book.get(job_id)
            if job is None or job.state is not JobState.RUNNING or job.stop_intent is not None:
                continue
            stopping.append(job.with_changes(stop_intent=JobState.PENDING))
        if stopping:
            self.store.write([], stopping)
            for job in stopping:
                self.book.put(job)
                log.info("job %s preempted: it will be requeued once stopped", job.id)
        self.scheduler.stops_recorded(job_ids)
        return stopping

    def _launch(self, started: list[Job]) -> None:
        launched: list[tuple[Job, Launched]] = []
        for job in started:
            try:
                port = self._ports.take(job.id) if job.spec.distributed else None
                env = build_job_env(job, self._base_env, self.inventory.gpu_mem_mib())
                argv, env = job_process(job, env, port)
                launched.append((job, self.executor.launch(job, argv, env)))
            except Exception as exc:  # the job cannot start; it must not stay RUNNING
                log.warning("job %s could not start: %s", job.id, exc)
                if getattr(exc, "node_lost", False):  # its machine is gone (Ray backend)
                    lost = ExitStatus(exit_code=None, node_lost=True, reason=f"NodeLost: {exc}")
                    self._finish(job.id, lost, None)
                else:
                    failed = ExitStatus(exit_code=None, lost=True)
                    self._finish(job.id, failed, f"LaunchFailed: {exc}")
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
                job, status.exit_code, status.signal, status.timed_out, status.lost,
                status.stop_requested,
            )  # fmt: skip
            if status.node_lost and state is not JobState.CANCELLED:
                state, reason = JobState.NODE_FAIL, status.reason
            if status.reason and state is JobState.FAILED and not reason:
                judged = status.reason
            if state is JobState.FAILED and not reason:
                state, reason = self._diagnose(job, judged)
            ended_at = status.ended_at or self._clock()
            if state is JobState.PENDING:
                ended = _requeued(job, ended_at, judged)
            else:
                ended = job.transition(
                    state, exit_code=exit_code, ended_at=ended_at, reason=reason or judged
                )
            self.store.write([], [ended])
            self.book.put(ended)
            self.scheduler.ended(ended, ended_at)
            self._ports.release(job_id)
        log.info("job %s %s%s", job_id, ended.state.value,
                 "" if ended.reason == REASON_NONE else f" ({ended.reason})")  # fmt: skip
        if ended.state.is_terminal:
            self.on_ended(ended)

    def _diagnose(self, job: Job, judged: str) -> tuple[JobState, str | None]:
        """A failed job's log tail says more than its exit code: GPU out-of-memory (its own
        state), or which torchrun rank failed."""
        tail = _log_tail(self.executor.log_path(job.id))
        rank = rank_failure(tail) if job.spec.distributed == "torchrun" else None
        oom = oom_line(tail)
        if oom is None:
            return JobState.FAILED, rank
        peak = self.gpu_peak_mib(job.id)
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

    def request_stop(self, job: Job, intent: JobState, reason: str | None = None) -> Job:
        """Record why a running job is being stopped (`reason`: the server's own, e.g. idle),
        then signal it (caller holds no lock)."""
        with self.book.mutation_lock:
            current = self.book.get(job.id)
            if current is None or current.state is not JobState.RUNNING:
                return current or job
            # A cancel overrides a preemption in progress: the job must not come back.
            if current.stop_intent is None or (
                intent is JobState.CANCELLED and current.stop_intent is JobState.PENDING
            ):
                current = current.with_changes(
                    stop_intent=intent, **({"reason": reason} if reason else {})
                )
                self.store.write([], [current])
                self.book.put(current)
        if current.pid is not None:
            self.executor.stop(current)
        return current

    # -- GPUs out of service -----------------------------------------------------------------
    def drain_gpu(self, gpu_index: int, reason: str, source: str) -> list[Job]:
        """Take a GPU out of service, durably; jobs running on it end NODE_FAIL (stopped like a
        cancel, whole tree). Returns those jobs."""
        now = self._clock()
        drain = Drain(reason, source, now)
        self.store.save_drain(gpu_index, drain)
        self.drains[gpu_index] = drain
        self.scheduler.drained(gpu_index, True, now)
        failing = []
        with self.book.mutation_lock:
            for job in self.book.running():
                if gpu_index in job.gpus and job.stop_intent not in _FINAL_INTENTS:
                    why = f"NodeFail: GPU {gpu_index} was taken out of service: {reason}"
                    failing.append(job.with_changes(stop_intent=JobState.NODE_FAIL, reason=why))
            if failing:
                self.store.write([], failing)
                for job in failing:
                    self.book.put(job)
        log.warning("GPU %s drained (%s): %s", gpu_index, source, reason)
        for job in failing:
            if job.pid is not None:
                self.executor.stop(job)
        self.wake()
        return failing

    def resume_gpu(self, gpu_index: int) -> None:
        """Put a drained GPU back in service."""
        self.store.save_drain(gpu_index, None)
        self.drains.pop(gpu_index, None)
        self.scheduler.drained(gpu_index, False, self._clock())
        log.info("GPU %s back in service", gpu_index)
        self.wake()

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
            self.scheduler.ended(requeued, self._clock())
        log.info("job %s requeued: it had not started when the server stopped", job.id)


def _requeued(job: Job, stopped_at: float, reason: str) -> Job:
    """A preempted job back in the queue, keeping the GPU service it attained."""
    started = stopped_at if job.started_at is None else job.started_at
    ran_s = max(0.0, stopped_at - started)
    return job.transition(
        JobState.PENDING, gpus=(), started_at=None, pid=None, pid_started_at=None,
        stop_intent=None, exit_code=None, reason=reason, restarts=job.restarts + 1,
        attained_gpu_s=job.attained_gpu_s + len(job.gpus) * ran_s,
    )  # fmt: skip


def _log_tail(path: str, size: int = 16_384) -> str:
    """The end of a job's log (where torchrun prints its failure summary)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - size))
            return f.read().decode(errors="replace")
    except OSError:
        return ""
