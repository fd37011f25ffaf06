"""The GPU history as the server wires it: the telemetry sampler (`GpuMonitor.sample`, fed by
a scripted telemetry source in place of NVML) records every sample in the ring with the jobs
holding each GPU; the minute buckets land in a real SQLite database; a finished job's window
is answered from there by a new server's history (its ring empty: a restart)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from gpuyard.adapters.store.sql import SqlJobStore, sqlite_url
from gpuyard.domain.job import Gpu, Job, JobSpec, NodeCapacity
from gpuyard.domain.states import JobState
from gpuyard.services.jobs.book import JobBook
from gpuyard.services.machine.gpu_history import GpuHistory
from gpuyard.services.machine.telemetry import GpuMonitor
from gpuyard.services.ports import GpuReading
from gpuyard.services.scheduler.inventory import Inventory

T0 = 1_800_000_000.0  # a minute boundary
UUIDS = {0: "GPU-aaaa", 1: "GPU-bbbb"}


class ScriptedGpus:
    """A GpuTelemetrySource whose utilisation is set by the test."""

    def __init__(self) -> None:
        self.util = {0: 0, 1: 0}

    def read(self, indices: Sequence[int], *, processes: bool) -> list[GpuReading]:
        return [
            GpuReading(i, util_pct=self.util[i], memory_used_mib=100 * (i + 1), temperature_c=50,
                       power_w=75.5, processes=() if processes else None)
            for i in indices
        ]  # fmt: skip

    def close(self) -> None:
        pass


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def test_a_finished_jobs_gpu_history_outlives_the_ring(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "gpuyard.db")
    store = SqlJobStore(url)
    clock, gpus = Clock(), ScriptedGpus()
    job = Job(5, JobSpec(("train",), "train", "/", gpus=1), "ann", JobState.RUNNING, T0,
              gpus=(1,), started_at=T0)  # fmt: skip
    book = JobBook([job])
    inventory = Inventory(
        tuple(Gpu(i, u, "H200", 143771, True) for i, u in UUIDS.items()),
        NodeCapacity("n", 8, 1024), "nvml",
    )  # fmt: skip
    monitor = GpuMonitor(lambda: gpus, _NoOwners(), book, inventory, clock=clock,
                         monotonic=clock)  # fmt: skip
    monitor.history = history = GpuHistory(UUIDS, store, clock=clock)
    monitor.open()
    for second in range(120):  # two minutes: the job's GPU busy in the second one
        gpus.util[1] = 90 if second >= 60 else 10
        monitor.sample()
        clock.now += 1.0
    live = history.job_series(job, max_points=4)
    assert [(s.index, s.uuid) for s in live] == [(1, "GPU-bbbb")]
    assert [p.util_pct for p in live[0].points] == [10, 10, 90, 90]
    assert history.flush() == 4  # two GPUs x two whole minutes, one write
    store.close()

    # A restart: the database reopened, a new (empty) ring; the job ended meanwhile.
    reopened = SqlJobStore(url)
    try:
        later = GpuHistory(UUIDS, reopened, clock=clock)
        assert len(later.ring) == 0
        ended = replace(job, state=JobState.COMPLETED, ended_at=T0 + 120)
        [gpu] = later.job_series(ended, max_points=600)
        assert gpu.resolution_s == 60
        assert [(p.t, p.util_pct, p.mem_used_mib, p.power_w) for p in gpu.points] == [
            (T0, 10.0, 200.0, 75.5), (T0 + 60, 90.0, 200.0, 75.5)
        ]  # fmt: skip
        buckets = reopened.load_gpu_buckets("GPU-bbbb", 0, 1e12)
        assert [b.holders for b in buckets] == [(5,), (5,)]
    finally:
        reopened.close()


class _NoOwners:
    def owners(self, pids: object, supervisors: object) -> dict[int, int]:
        return {}


def test_a_joined_machines_gpus_have_history_from_their_first_sample(tmp_path: Path) -> None:
    store = SqlJobStore(sqlite_url(tmp_path / "gpuyard.db"))
    clock, gpus = Clock(), ScriptedGpus()
    inventory = Inventory((Gpu(0, UUIDS[0], "H200", 143771, True, "m0"),),
                          NodeCapacity("m0", 8, 1024), "nvml")  # fmt: skip
    job = Job(7, JobSpec(("train",), "train", "/", gpus=1), "ann", JobState.RUNNING, T0,
              gpus=(1,), started_at=T0 + 30)  # fmt: skip
    book = JobBook([job])
    monitor = GpuMonitor(lambda: gpus, _NoOwners(), book, inventory, clock=clock,
                         monotonic=clock)  # fmt: skip
    monitor.history = history = GpuHistory({0: UUIDS[0]}, store, clock=clock)
    monitor.open()
    try:
        for second in range(60):
            if second == 30:  # a machine joins with GPU 1
                joined = Gpu(1, UUIDS[1], "H200", 143771, True, "m1")
                inventory.add_machine(NodeCapacity("m1", 8, 1024), [joined])
                history.add_gpus({1: UUIDS[1]})
            gpus.util[1] = 70
            monitor.sample()
            clock.now += 1.0
        [series] = history.job_series(job, max_points=60)
        assert series.uuid == UUIDS[1] and series.points
        assert {p.util_pct for p in series.points} == {70}  # its samples since it joined
        assert history.flush() == 2  # a bucket for each GPU: the new one's too
    finally:
        store.close()
