"""The GPU history's ring and queries, on a hand-driven clock: wrap-around, downsampling to
bucket means, minute buckets' means and peaks, and a past job's window answered from the
store once the ring forgot it (as after a restart)."""

from __future__ import annotations

from dataclasses import replace

from gpuyard.adapters.store.memory import MemoryJobStore
from gpuyard.domain.job import Attempt, Job, JobSpec
from gpuyard.domain.states import JobState
from gpuyard.services.machine.gpu_history import GpuHistory
from gpuyard.services.machine.telemetry_ring import TelemetryRing
from gpuyard.services.ports import GpuReading

T0 = 1_700_000_040.0  # a minute boundary


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def reading(
    index: int, util: int | None, mem: int = 1000, temp: int = 60, power: float = 100.0
) -> GpuReading:
    return GpuReading(index, util_pct=util, memory_used_mib=mem, temperature_c=temp, power_w=power)


def running(job_id: int, *gpus: int) -> Job:
    return Job(job_id, JobSpec(("train",), "train", "/", gpus=len(gpus)), "ann",
               JobState.RUNNING, T0, gpus=gpus, started_at=T0)  # fmt: skip


def feed(history: GpuHistory, clock: Clock, seconds: int, util_of, jobs=()) -> None:  # type: ignore[no-untyped-def]
    for _ in range(seconds):
        t = int(clock.now - T0)
        history.record(clock.now, {0: reading(0, util_of(t)), 1: reading(1, None)}, jobs)
        clock.now += 1.0


def test_ring_wraps_keeping_the_newest_samples_in_order(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr("gpuyard.services.machine.telemetry_ring._SETS_KEPT", 3)
    ring = TelemetryRing(["GPU-a"], capacity=5)
    for t in range(12):
        ring.append(float(t), [reading(0, t)], [(t,)])
    assert len(ring) == 5 and ring.oldest_at == 7.0 and ring.newest_at == 11.0
    window = ring.window(0, 0.0, 100.0)
    assert list(window.times) == [7.0, 8.0, 9.0, 10.0, 11.0]
    assert list(window.util) == [7, 8, 9, 10, 11]
    assert [window.holder_sets[i] for i in window.holders] == [(7,), (8,), (9,), (10,), (11,)]
    # Holder sets no sample refers to any more are forgotten as the ring turns.
    assert len(window.holder_sets) <= 1 + 2 * 5
    assert list(ring.window(0, 8.0, 10.0).util) == [8, 9]


def test_a_step_back_of_the_wall_clock_empties_the_ring() -> None:
    ring = TelemetryRing(["GPU-a"], capacity=10)
    ring.append(100.0, [reading(0, 1)], [()])
    ring.append(50.0, [reading(0, 2)], [()])
    assert len(ring) == 1 and list(ring.window(0, 0, 1e9).util) == [2]


def test_queries_downsample_to_bucket_means_and_skip_na() -> None:
    clock, store = Clock(T0), MemoryJobStore()
    history = GpuHistory({0: "GPU-a", 1: "GPU-b"}, store, clock=clock)
    feed(history, clock, 100, lambda t: t)  # util 0, 1, ..., 99 at T0 + t
    series = history.gpu_series(0, T0, T0 + 100, max_points=10)
    assert series.uuid == "GPU-a" and series.resolution_s == 10.0
    assert [p.t for p in series.points] == [T0 + 10 * k for k in range(10)]
    assert [p.util_pct for p in series.points] == [4.5 + 10 * k for k in range(10)]
    assert {(p.mem_used_mib, p.temp_c, p.power_w) for p in series.points} == {(1000, 60, 100)}
    raw = history.gpu_series(0, T0 + 20, T0 + 25, max_points=600)
    assert raw.resolution_s == 1.0 and [p.util_pct for p in raw.points] == [20, 21, 22, 23, 24]
    # GPU 1 never had a utilisation reading: n/a, while its memory was read.
    assert {p.util_pct for p in history.gpu_series(1, T0, T0 + 100, 10).points} == {None}


def test_minute_buckets_hold_means_peaks_and_holders_and_serve_after_the_ring_is_gone() -> None:
    clock, store = Clock(T0), MemoryJobStore()
    history = GpuHistory({0: "GPU-a", 1: "GPU-b"}, store, clock=clock)
    job = running(7, 0)
    feed(history, clock, 60, lambda t: 10 if t % 2 else 90, [job])  # minute 1: mean 50, peak 90
    feed(history, clock, 30, lambda t: 30)  # half of minute 2, nobody on it
    assert history.flush() == 2  # the whole minute, both GPUs; minute 2 is not over
    first = store.load_gpu_buckets("GPU-a", 0, 1e12)
    assert [(b.at, b.resolution_s, b.util_pct, b.util_peak_pct, b.holders) for b in first] == [
        (T0, 60, 50.0, 90.0, (7,))
    ]
    assert (first[0].mem_used_mib, first[0].temp_c, first[0].power_w) == (1000, 60, 100)
    assert history.flush(final=True) == 2  # at stop: the current minute's samples too
    assert [b.util_pct for b in store.load_gpu_buckets("GPU-a", 0, 1e12)] == [50.0, 30.0]
    # A restart: a new history over the same store, its ring empty. The job's window (its
    # first minute) is answered from the stored bucket.
    clock.now += 3600
    after = GpuHistory({0: "GPU-a", 1: "GPU-b"}, store, clock=clock)
    ended = replace(running(7, 0), state=JobState.COMPLETED, ended_at=T0 + 60)
    [gpu] = after.job_series(ended, max_points=600)
    assert gpu.index == 0 and gpu.resolution_s == 60
    assert [(p.t, p.util_pct) for p in gpu.points] == [(T0, 50.0)]


def test_a_jobs_series_covers_its_earlier_attempts_on_their_gpus() -> None:
    clock, store = Clock(T0), MemoryJobStore()
    history = GpuHistory({0: "GPU-a", 1: "GPU-b"}, store, clock=clock)
    feed(history, clock, 200, lambda t: t % 100)
    first_run = Attempt(1, T0 + 10, T0 + 20, JobState.FAILED, gpus=(1,))
    job = Job(3, JobSpec(("x",), "x", "/", gpus=1), "ann", JobState.RUNNING, T0, gpus=(0,),
              started_at=T0 + 150, attempts=(first_run,))  # fmt: skip
    by_index = {s.index: s for s in history.job_series(job, max_points=600, now=T0 + 160)}
    assert sorted(by_index) == [0, 1]
    assert [p.util_pct for p in by_index[0].points] == [50 + k for k in range(10)]
    assert len(by_index[1].points) == 10 and by_index[1].points[0].t == T0 + 10


def test_a_sampler_faster_than_1_hz_fills_the_ring_once_a_second() -> None:
    clock, store = Clock(T0), MemoryJobStore()
    history = GpuHistory({0: "GPU-a"}, store, period_s=0.2, clock=clock)
    assert history.ring.capacity == 86_400  # 24 h at 1 s, not at 0.2 s
    for k in range(50):  # 10 s at 5 Hz
        history.record(T0 + 0.2 * k, {0: reading(0, k)}, ())
    window = history.ring.window(0, 0, 1e12)
    assert list(window.times) == [T0 + k for k in range(10)]
