"""Idle jobs are flagged after a window of unused GPUs, and cancelled after a warning."""

from __future__ import annotations

from types import MappingProxyType

from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.states import JobState
from gpuyard.services.machine.idle import IdleWatch
from gpuyard.services.machine.telemetry import GpuTelemetry, TelemetrySnapshot
from gpuyard.services.ports import GpuReading


def at(t: float, **util: int | None) -> TelemetrySnapshot:
    gpus = {
        int(k[1:]): GpuTelemetry(GpuReading(int(k[1:]), util_pct=u), None) for k, u in util.items()
    }
    return TelemetrySnapshot(t, MappingProxyType(gpus))


JOB = Job(4, JobSpec(("x",), "x", "/", gpus=2), "ada", JobState.RUNNING, 0.0, gpus=(2, 3))


def test_flagged_after_the_window_reset_by_one_busy_sample_cancelled_after_the_warning() -> None:
    cancelled: list[tuple[int, str]] = []
    watch = IdleWatch(5, 1800, 900, lambda job, why: cancelled.append((job.id, why)))
    watch.update(at(0, g2=1, g3=0), [JOB])
    watch.update(at(1000, g2=2, g3=3), [JOB])
    assert watch.idle_since(4) is None  # not yet 30 minutes
    watch.update(at(1100, g2=40, g3=0), [JOB])  # one GPU busy: the clock starts over
    watch.update(at(1200, g2=0, g3=0), [JOB])
    watch.update(at(3000, g2=0, g3=0), [JOB])
    assert watch.idle_since(4) == 1200
    assert cancelled == []
    watch.update(at(3900, g2=0, g3=0), [JOB])
    assert [job_id for job_id, _ in cancelled] == [4] and "below 5%" in cancelled[0][1]
    watch.update(at(4000, g2=0, g3=0), [JOB])
    assert len(cancelled) == 1  # once


def test_unreadable_utilisation_never_makes_a_job_idle() -> None:
    watch = IdleWatch(5, 10, 10, lambda job, why: None)
    watch.update(at(0, g2=0, g3=None), [JOB])
    watch.update(at(100, g2=0, g3=None), [JOB])
    assert watch.idle_since(4) is None


def test_a_wall_clock_step_neither_cancels_nor_spares_an_idle_job() -> None:
    """Durations come from the monotonic reading; the wall time is only what `show` says."""
    cancelled: list[int] = []
    watch = IdleWatch(5, 60, 60, lambda job, why: cancelled.append(job.id))

    def sample(wall: float, elapsed: float) -> None:
        snap = at(wall, g2=0, g3=0)
        watch.update(TelemetrySnapshot(snap.taken_at, snap.gpus, elapsed), [JOB])

    sample(1_000, 5)
    sample(1_000 + 86_400, 6)  # the wall clock set a day forward: one second has passed
    assert watch.idle_since(4) is None and cancelled == []
    sample(500, 70)  # and back again, past a day: 65 s idle
    assert watch.idle_since(4) == 1_000 and cancelled == []
    sample(600, 126)  # 121 s idle: past the window and the warning
    assert cancelled == [4]
