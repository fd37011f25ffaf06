"""Per-job GPU stats from telemetry samples (pure), and the /metrics histograms."""

from __future__ import annotations

from types import MappingProxyType

from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.states import JobState
from gpuyard.services.machine.telemetry import (
    AttributedProcess,
    GpuTelemetry,
    job_memory_mib,
    update_stats,
)
from gpuyard.services.metrics import Histogram
from gpuyard.services.ports import GpuReading


def running(job_id: int, gpus: tuple[int, ...]) -> Job:
    spec = JobSpec(argv=("train",), name="train", workdir="/", gpus=len(gpus))
    return Job(job_id, spec, "alice", JobState.RUNNING, 0.0, gpus=gpus, started_at=0.0)


def gpu(index: int, util: int | None, used: int | None, procs=None, error=None) -> GpuTelemetry:  # type: ignore[no-untyped-def]
    reading = GpuReading(index, util_pct=util, memory_used_mib=used, memory_total_mib=16384,
                         error=error)  # fmt: skip
    return GpuTelemetry(reading, procs)


def test_stats_over_two_gpus_and_three_samples() -> None:
    job = running(7, (0, 1))
    stats = None
    for utils in ((80, 100), (60, 60), (None, None)):
        sample = {0: gpu(0, utils[0], 1000), 1: gpu(1, utils[1], 2500), 2: gpu(2, 99, 9999)}
        stats = update_stats(stats, job, MappingProxyType(sample), 1.0)
    assert stats is not None
    assert stats.samples == 2  # the sample without utilisation counts for time, not the mean
    assert stats.util_mean_pct == 75.0  # mean of 90 and 60: GPU 2 is not the job's
    assert stats.util_peak_pct == 100
    assert stats.memory_peak_mib == 3500
    assert (stats.gpu_s, stats.sampled_s) == (6.0, 3.0)


def test_unsampled_or_lost_gpus_leave_stats_unchanged() -> None:
    job = running(7, (0,))
    assert update_stats(None, job, {1: gpu(1, 50, 10)}, 1.0) is None
    assert update_stats(None, job, {0: gpu(0, None, None, error="GPU is lost")}, 1.0) is None


def test_job_memory_prefers_its_own_processes() -> None:
    mine = AttributedProcess(100, 3000, 7)
    other = AttributedProcess(200, 500, None)
    assert job_memory_mib(7, gpu(0, 0, 5000, (mine, other))) == 3000
    # Listed, but none is the job's while another job's process is: it uses nothing here.
    assert job_memory_mib(7, gpu(0, 0, 5000, (AttributedProcess(300, 900, 8),))) == 0
    assert job_memory_mib(7, gpu(0, 0, 5000, ())) == 0
    # No listing (n/a), or processes that cannot be traced (a container's pids): the GPU's use.
    assert job_memory_mib(7, gpu(0, 0, 5000, None)) == 5000
    assert job_memory_mib(7, gpu(0, 0, 5000, (other,))) == 5000
    assert job_memory_mib(7, gpu(0, 0, 5000, (AttributedProcess(100, None, 7),))) == 5000


def test_histogram_is_cumulative() -> None:
    histogram = Histogram((0.1, 1.0))
    for value in (0.05, 0.1, 0.5, 7.0):
        histogram.observe(value)
    view = histogram.view()
    assert view.buckets == ((0.1, 2), (1.0, 3), (float("inf"), 4))
    assert (view.count, round(view.sum, 2)) == (4, 7.65)


def test_a_finished_jobs_stats_round_trip_through_their_saved_form() -> None:
    from gpuyard.domain.job import Gpu, NodeCapacity
    from gpuyard.services.jobs.book import JobBook
    from gpuyard.services.machine.telemetry import GpuMonitor, JobGpuStats
    from gpuyard.services.scheduler.inventory import Inventory

    inventory = Inventory((Gpu(0, "GPU-0", "x", 1024, True),), NodeCapacity("n", 1, 1), "nvml")
    monitor = GpuMonitor(
        lambda: None,  # type: ignore[arg-type, return-value]
        None,  # type: ignore[arg-type]
        JobBook(),
        inventory,
    )
    assert monitor.saved_form(3) is None
    monitor.restore({3: {"samples": 2, "util_sum_pct": 150.0, "util_peak_pct": 90,
                         "memory_peak_mib": 900, "gpu_s": 4.0, "sampled_s": 2.0}})  # fmt: skip
    restored = monitor.job_stats(3)
    assert restored == JobGpuStats(2, 150.0, 90, 900, 4.0, 2.0)
    assert restored is not None and restored.util_mean_pct == 75.0
    saved = {"samples": 2, "util_sum_pct": 150.0, "util_peak_pct": 90, "memory_peak_mib": 900,
             "gpu_s": 4.0, "sampled_s": 2.0}  # fmt: skip
    # Saved before per-GPU peaks were kept: restored without one.
    assert monitor.saved_form(3) == {
        **saved,
        "memory_peak_per_gpu_mib": None,
        "energy_j": None,
        "energy_integrated": False,
    }
    monitor.restore({4: {**saved, "memory_peak_per_gpu_mib": 450}})
    assert monitor.saved_form(4) == {
        **saved,
        "memory_peak_per_gpu_mib": 450,
        "energy_j": None,
        "energy_integrated": False,
    }
    # With its energy (issue 24): kept as saved.
    monitor.restore({5: {**saved, "energy_j": 3600.0, "energy_integrated": True}})
    assert monitor.job_stats(5) == JobGpuStats(
        2, 150.0, 90, 900, 4.0, 2.0, energy_j=3600.0, energy_integrated=True
    )
