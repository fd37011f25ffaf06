"""Sweeps on the server: a sweep file becomes a job array of trials, and the median stopping
rule cancels the trials that fall behind.

Submit: the file's table is checked by the domain (`domain/sweep.py`), expanded into trials,
each trial's draft decided by the spec rules like any submission, and the whole sweep queued
as ONE job array (`JobSubmits.submit_array`: one durable write; trial `i` is task `i`, the
array's `array_max_running` is the sweep's `max_running`). Then the sweep's definition is
saved (`SweepStore`, table `sweeps`) under the array's id, which is the sweep's id. Sweeps are
few (people submit them): every one is kept in memory, loaded at start.

Early stop: a thread of its own ticks every `period_s` (2 s). For each sweep with an
`[early_stop]` and a running trial it follows every trial's metric in the progress service's
timeline (`ProgressService.points_after`: only the points new since the last tick, each value
at the step reported by then), kept as a `median_stop.Curve` (values by step, prefix sums),
asks `median_stop.should_stop` for each running trial against the others' curves, and asks
the losers to stop with stop intent CANCELLED and the reason (`EarlyStopped: val_loss 0.91
worse than the median 0.55 at step 300`), through the journal like any cancel: the trial ends
CANCELLED with that reason (Slurm's word for a job stopped before its end; `sweep show` shows
the reason). A tick costs what the trials reported since the last one, plus a binary search
per running trial and other trial (`bench/sweeps.py`). What was read is dropped when the
sweep has no running trial.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuyard.domain.errors import Conflict, GpuyardError, NotFound
from gpuyard.domain.job import Job
from gpuyard.domain.median_stop import Curve, should_stop
from gpuyard.domain.principal import Principal
from gpuyard.domain.spec_rules import decide_spec
from gpuyard.domain.states import JobState
from gpuyard.domain.sweep import Sweep, SweepRecord, Value, parse_sweep
from gpuyard.services.access.rules import owns, require_visible, sees_everyone
from gpuyard.services.jobs.desk import JobDesk
from gpuyard.services.jobs.submit import JobSubmits
from gpuyard.services.jobs.verbs import JobVerbs
from gpuyard.services.stores import SweepStore
from gpuyard.services.ticker import Ticker
from gpuyard.services.workflows.progress import ProgressService

log = logging.getLogger("gpuyard.sweeps")

SETTLED_S = 10.0  # a trial that ended this long ago has all its points read: kept, not read


@dataclass(frozen=True, slots=True)
class TrialView:
    """One trial as `sweep show` ranks it: its job (None: no longer kept), parameters, the
    metric's best and latest value and the latest step reported."""

    index: int
    job: Job | None
    params: Mapping[str, Value]
    best: float | None = None
    last: float | None = None
    step: int | None = None


@dataclass(slots=True)
class _Follow:
    """What was read of one trial's metric: its curve (values by step), the time of the last
    timeline point taken in (`after`), the step reported by then, its latest value; `final`:
    it ended long enough ago that nothing more will come."""

    curve: Curve = field(default_factory=Curve)
    after: float | None = None
    step: int = 0
    last: float | None = None
    final: bool = False

    def take(self, points: list[tuple[float, int | None, float | None]]) -> None:
        for at, step, value in points:
            if step is not None:
                self.step = step
            if value is not None:
                self.curve.add(self.step, value)
                self.last = value
            self.after = at


class SweepService:
    """Submits sweeps, answers what they became, and stops their losing trials (a server
    Background thread)."""

    def __init__(
        self,
        submits: JobSubmits,
        verbs: JobVerbs,
        desk: JobDesk,
        store: SweepStore,
        progress: ProgressService | None,
        *,
        period_s: float = 2.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._submits, self._verbs, self._desk = submits, verbs, desk
        self._store = store
        self._progress = progress
        self._period_s = period_s
        self._clock = clock
        self._lock = threading.Lock()
        self._sweeps: dict[int, SweepRecord] = {r.id: r for r in store.load_sweeps()}
        self._parsed: dict[int, Sweep] = {}
        # What the tick read of each trial, by sweep then job id (only the tick's thread).
        self._reads: dict[int, dict[int, _Follow]] = {}
        self._ticker = Ticker(
            "gpuyard-sweeps", self.tick, lambda: self._period_s, log, "sweep tick failed"
        )

    # -- use cases --------------------------------------------------------------------------
    def submit(
        self, definition: Mapping[str, Any], actor: Principal, default_workdir: str
    ) -> tuple[SweepRecord, list[Job]]:
        """Check and expand the sweep, queue its trials as one job array, save it. `workdir`
        in the definition's place: the client's (`default_workdir` when it sent none)."""
        sweep = parse_sweep(definition)
        trials = sweep.expand()
        specs = [
            decide_spec(
                sweep.draft(i, params, None),
                default_workdir=default_workdir,
                default_preemptible=self._submits.preemptible_default,
            )
            for i, params in enumerate(trials)
        ]
        tasks = self._submits.submit_array(specs, range(len(specs)), actor)
        first = tasks[0]
        record = SweepRecord(
            first.array_job_id or first.id, actor.user, sweep.name, first.submitted_at,
            dict(definition), tuple(trials),
        )  # fmt: skip
        try:
            self._store.save_sweep(record)
        except GpuyardError:
            self._cancel_all(tasks, actor)
            raise
        except Exception as exc:
            self._cancel_all(tasks, actor)
            raise Conflict(f"the sweep was not saved ({exc}); its trials were cancelled") from exc
        with self._lock:
            self._sweeps[record.id] = record
            self._parsed[record.id] = sweep
        return record, tasks

    def get(self, sweep_id: int, actor: Principal) -> SweepRecord:
        """A sweep the actor may see (another user's is not found, as their jobs are)."""
        with self._lock:
            record = self._sweeps.get(sweep_id)
        missing = f"sweep {sweep_id} not found: `gpuyard sweep list` lists yours"
        if record is None:
            raise NotFound(missing)
        require_visible(actor, record.owner, missing)
        return record

    def list_sweeps(self, actor: Principal, *, everyone: bool = False) -> list[SweepRecord]:
        """The actor's sweeps (an admin with `everyone`: all), by id."""
        with self._lock:
            records = sorted(self._sweeps.values(), key=lambda r: r.id)
        if everyone and sees_everyone(actor):
            return records
        return [r for r in records if owns(actor, r.owner)]

    def trials(self, record: SweepRecord) -> list[TrialView]:
        """The sweep's trials ranked: by the metric's best value (its goal's way), those that
        reported nothing after, in trial order."""
        sweep = self._sweep(record)
        tasks = self._tasks(record)
        views = []
        for index, params in enumerate(record.trials):
            job = tasks.get(index)
            best = last = None
            step: int | None = None
            if job is not None and sweep.metric is not None:
                read = self._read(job, sweep.metric.name, None)
                if len(read.curve):
                    minimize = sweep.metric.goal == "minimize"
                    best = read.curve.low if minimize else read.curve.high
                    step, last = read.step, read.last
            if job is not None and job.started_at is not None and self._progress is not None:
                step = self._progress.progress(job).step or step
            views.append(TrialView(index, job, params, best, last, step))
        sign = -1.0 if sweep.metric is not None and sweep.metric.goal == "maximize" else 1.0
        return sorted(views, key=lambda v: (v.best is None, sign * (v.best or 0.0), v.index))

    def summary(self, record: SweepRecord) -> dict[str, int]:
        """How many of the sweep's trials are in each state (by the state's name)."""
        counts: dict[str, int] = {}
        for job in self._tasks(record).values():
            counts[job.state.value] = counts.get(job.state.value, 0) + 1
        return counts

    # -- the thread --------------------------------------------------------------------------
    def start(self) -> None:
        self._ticker.start()

    def stop(self) -> None:
        self._ticker.stop()

    def tick(self) -> list[tuple[int, str]]:
        """Judge every running trial of every sweep with early stop; returns the trials asked
        to stop now, with why."""
        with self._lock:
            records = list(self._sweeps.values())
        stopped: list[tuple[int, str]] = []
        for record in records:
            sweep = self._sweep(record)
            if sweep.early_stop is None or sweep.metric is None or self._progress is None:
                continue
            # Running trials are always in the book: a sweep with none costs no store read.
            kept = self._desk.book.array_tasks(record.id)
            if not any(j.state is JobState.RUNNING for j in kept):
                self._reads.pop(record.id, None)
                continue
            tasks = self._tasks(record)
            running = [j for j in tasks.values() if j.state is JobState.RUNNING]
            stopped += self._judge(sweep, tasks, running, self._reads.setdefault(record.id, {}))
        return stopped

    def _judge(
        self,
        sweep: Sweep,
        tasks: Mapping[int, Job],
        running: list[Job],
        reads: dict[int, _Follow],
    ) -> list[tuple[int, str]]:
        assert sweep.metric is not None and sweep.early_stop is not None
        rule, metric = sweep.early_stop, sweep.metric
        started = {j.id: self._read(j, metric.name, reads) for j in tasks.values()
                   if j.started_at is not None}  # fmt: skip
        curves = {job_id: read.curve for job_id, read in started.items()}
        stopped = []
        for job in running:
            if job.stop_intent is not None:
                continue
            others = [c for job_id, c in curves.items() if job_id != job.id]
            decision = should_stop(
                curves[job.id], others, minimize=metric.goal == "minimize",
                min_steps=rule.min_steps, min_trials=rule.min_trials,
            )  # fmt: skip
            if decision is None:
                continue
            why = decision.reason(metric.name)
            if self._desk.stops.request(job.id, JobState.CANCELLED, why) is not None:
                log.info("job %s (sweep %s, trial %s): %s", job.id, job.array_job_id,
                         job.array_task_id, why)  # fmt: skip
                stopped.append((job.id, why))
        if stopped:
            self._desk.wake()
        return stopped

    # -- inside ------------------------------------------------------------------------------
    def _sweep(self, record: SweepRecord) -> Sweep:
        with self._lock:
            found = self._parsed.get(record.id)
        if found is None:
            found = parse_sweep(record.definition)
            with self._lock:
                self._parsed[record.id] = found
        return found

    def _tasks(self, record: SweepRecord) -> dict[int, Job]:
        """The sweep's trials' jobs by trial index (the book's, else the store's)."""
        kept = self._desk.book.array_tasks(record.id)
        if len(kept) < len(record.trials):
            stored = {j.id: j for j in self._desk.store.array_tasks(record.id)}
            stored.update({j.id: j for j in kept})  # the book is never older than the store
            kept = list(stored.values())
        return {j.array_task_id: j for j in kept if j.array_task_id is not None}

    def _read(self, job: Job, metric: str, reads: dict[int, _Follow] | None) -> _Follow:
        """The trial's metric by step, following it: only the timeline points after those
        read before (`reads`: the tick's; None: read it all now, keep nothing). The last point
        of a running trial is left for the next read (its bucket may still take reports);
        once it ended long enough ago, nothing more is read."""
        known = reads.get(job.id) if reads is not None else None
        if known is not None and known.final:
            return known
        if self._progress is None or job.started_at is None:
            return _Follow()  # never ran: nothing reported (and nothing to look up)
        follow = known if known is not None else _Follow()
        points = self._progress.points_after(job, metric, follow.after)
        ended = job.ended_at
        settled = job.state.is_terminal and ended is not None and self._clock() - ended > SETTLED_S
        follow.take(points if settled or reads is None else points[:-1])
        follow.final = settled
        if reads is not None:
            reads[job.id] = follow
        return follow

    def _cancel_all(self, tasks: list[Job], actor: Principal) -> None:
        for task in tasks:
            try:
                self._verbs.cancel(task.id, actor)
            except GpuyardError:
                pass
