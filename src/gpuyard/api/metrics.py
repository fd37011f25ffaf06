"""`/metrics`: GPU telemetry under dcgm-exporter's names and labels (so its Grafana dashboards
work unchanged), plus gpuyard_* figures for the queue.

The labels are dcgm-exporter's (`gpu`, `UUID`, `pci_bus_id`, `device`, `modelName`,
`Hostname`, `DCGM_FI_DRIVER_VERSION`; and `hostname`, the same as `Hostname`, which its
dashboard's legends read) and, as its HPC job mapping adds, `hpc_job`: the gpuyard job on the
GPU. Each GPU has one series per family, whatever the number of jobs on it, so a dashboard's
sum or average counts each GPU once: a GPU shared by several jobs (`--gpu-mem`) has their ids
in `hpc_job`, comma-separated in ascending order ("12,15"; "" when none holds it), and one
`gpuyard_gpu_job_info` series (value 1) per job on it, to join or select on (`... and on(UUID)
gpuyard_gpu_job_info{hpc_job="12"}`). The families themselves are in `dcgm_families.py`.

AMD GPUs are exported under AMD's device-metrics-exporter names instead (`gpu_gfx_activity`,
`gpu_used_vram`, `gpu_junction_temperature`, `gpu_power_usage`, `gpu_ecc_uncorrect_total`...)
and its mandatory labels (`gpu_id`: amdsmi's index of the GPU, `serial_number`, `card_model`,
`hostname`, `gpu_partition_id`, `gpu_compute_partition_type`, `gpu_memory_partition_type`),
plus its optional `gpu_uuid` and, as its Slurm job mapping adds, `job_id` and `job_user` (one
series per GPU too: a shared GPU's jobs and their distinct owners comma-separated). The AMD
families appear only when the server has AMD GPUs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from gpuyard.api.dcgm_families import DCGM_FAMILIES, XID_FAMILY, xid_labels
from gpuyard.domain.job import Gpu, Job
from gpuyard.services.jobs.reads import JobReads
from gpuyard.services.machine.gpus import GpuDesk, GpuHolding
from gpuyard.services.metrics import HistogramView, QueueMetrics
from gpuyard.services.ports import GpuReading
from gpuyard.services.scheduler.live import LiveScheduler
from gpuyard.services.server import ServerFacade
from gpuyard.services.workflows.progress import ProgressService

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# dcgm-exporter's own labels; `hostname` too (the same value): its Grafana dashboard's legends
# read `{{hostname}}`, which dcgm-exporter's `Hostname` does not fill.
GPU_LABELS = (
    "gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "hostname",
    "DCGM_FI_DRIVER_VERSION", "hpc_job",
)  # fmt: skip
GPU_JOB_LABELS = ("gpu", "UUID", "pci_bus_id", "Hostname", "hostname", "hpc_job", "user")


def _fb_free(r: GpuReading) -> int | None:
    if r.memory_used_mib is None or r.memory_total_mib is None:
        return None
    return r.memory_total_mib - r.memory_used_mib


def _ids(jobs: Iterable[Job]) -> str:
    """A shared GPU's jobs in one label value: "12,15" (ascending), "" for none."""
    return ",".join(str(i) for i in sorted({job.id for job in jobs}))


AMD_LABELS = (
    "gpu_id", "serial_number", "card_model", "hostname", "gpu_partition_id",
    "gpu_compute_partition_type", "gpu_memory_partition_type", "gpu_uuid", "job_id", "job_user",
)  # fmt: skip

# (device-metrics-exporter name, its help, value from one reading)
_AMD: tuple[tuple[str, str, Callable[[GpuReading], float | None]], ...] = (
    ("gpu_gfx_activity", "Graphics engine usage percentage (0 - 100)", lambda r: r.util_pct),
    ("gpu_umc_activity", "Memory engine usage percentage (0 - 100)",
     lambda r: r.memory_util_pct),
    ("gpu_used_vram", "Total VRAM memory used in MB", lambda r: r.memory_used_mib),
    ("gpu_free_vram", "Total VRAM memory free in MB", _fb_free),
    ("gpu_total_vram", "Total VRAM available in MB", lambda r: r.memory_total_mib),
    ("gpu_junction_temperature", "Hotspot (aka junction) temperature value in Celsius",
     lambda r: r.temperature_c),
    ("gpu_package_power", "Current socket power in Watts", lambda r: r.power_w),
    ("gpu_power_usage", "GPU power usage in Watts", lambda r: r.power_w),
    ("gpu_ecc_correct_total", "Total Correctable ECC error count", lambda r: r.ecc_corrected),
    ("gpu_ecc_uncorrect_total", "Total Uncorrectable ECC error count",
     lambda r: r.ecc_uncorrected),
)  # fmt: skip


class ServerCollector(Collector):
    """Builds every family at scrape time from the server's latest state."""

    def __init__(
        self,
        reads: JobReads,
        gpus: GpuDesk,
        scheduler: LiveScheduler,
        metrics: QueueMetrics,
        hostname: str,
    ) -> None:
        self._reads = reads
        self._gpus = gpus
        self._scheduler = scheduler
        self._metrics = metrics
        self._hostname = hostname

    def collect(self) -> Iterator[Metric]:
        yield from self._gpu_families()
        yield from self._queue_families()

    def _gpu_families(self) -> Iterator[Metric]:
        holdings = self._gpus.holdings()
        sampled = [h for h in holdings if h.telemetry is not None and h.gpu.vendor != "amd"]
        amd = [h for h in holdings if h.gpu.vendor == "amd"]
        if amd:
            yield from self._amd_families([h for h in amd if h.telemetry is not None])
        readings = [(h, h.telemetry.reading) for h in sampled if h.telemetry is not None]
        readings = [(h, r) for h, r in readings if r.error is None]
        for name, doc, value_of in DCGM_FAMILIES:
            family = GaugeMetricFamily(name, doc, labels=GPU_LABELS)
            for holding, reading in readings:
                value = value_of(reading)
                if value is not None:
                    family.add_metric(self._labels(holding, reading), float(value))
            yield family
        xid = GaugeMetricFamily(*XID_FAMILY, labels=(*GPU_LABELS, "err_code", "err_msg"))
        for holding, reading in readings:
            last = xid_labels(reading)
            if last is not None:
                xid.add_metric([*self._labels(holding, reading), last[1], last[2]], last[0])
        yield xid
        yield self._job_info([h for h in holdings if h.gpu.vendor != "amd"])

    def _labels(self, holding: GpuHolding, reading: GpuReading) -> list[str]:
        """The GPU's one label set: its jobs' ids together in `hpc_job`."""
        gpu = holding.gpu
        host, number = self._where(gpu)
        return [str(number), gpu.uuid, gpu.pci_bus_id, f"nvidia{number}", gpu.name, host,
                host, reading.driver_version or "", _ids(holding.jobs)]  # fmt: skip

    def _job_info(self, holdings: list[GpuHolding]) -> Metric:
        """One series per (GPU, job on it): which jobs a GPU's series stand for."""
        family = GaugeMetricFamily(
            "gpuyard_gpu_job_info", "A job on a GPU (1), labelled as that GPU's DCGM series "
            "(gpu, UUID, Hostname) with the job's id (hpc_job) and owner (user).",
            labels=GPU_JOB_LABELS,
        )  # fmt: skip
        for holding in holdings:
            gpu = holding.gpu
            host, number = self._where(gpu)
            for job in sorted(holding.jobs, key=lambda j: j.id):
                family.add_metric(
                    [str(number), gpu.uuid, gpu.pci_bus_id, host, host, str(job.id), job.owner],
                    1.0,
                )
        return family

    def _where(self, gpu: Gpu, device: bool = False) -> tuple[str, int]:
        """The GPU's machine and its number there, as that machine's own exporter would say
        (one exporter per host): on a cluster, each GPU under its machine's `Hostname` with its
        device index there; on one box, the server's host name and the GPU's index (`device`:
        its device index, as AMD's exporter numbers them)."""
        local = gpu.node in ("", "local")
        own = gpu.index if gpu.device_index is None else gpu.device_index
        return (self._hostname, own if device else gpu.index) if local else (gpu.node, own)

    def _amd_families(self, sampled: list[GpuHolding]) -> Iterator[Metric]:
        readings = [(h, h.telemetry.reading) for h in sampled if h.telemetry is not None]
        readings = [(h, r) for h, r in readings if r.error is None]
        for name, doc, value_of in _AMD:
            family = GaugeMetricFamily(name, doc, labels=AMD_LABELS)
            for holding, reading in readings:
                value = value_of(reading)
                if value is not None:
                    for labels in self._amd_label_sets(holding):
                        family.add_metric(labels, float(value))
            yield family
        clock = GaugeMetricFamily(
            "gpu_clock", "Clock measure of the GPU in Mhz", labels=(*AMD_LABELS, "clock_type")
        )
        for holding, reading in readings:
            if reading.sm_clock_mhz is not None:
                for labels in self._amd_label_sets(holding):
                    clock.add_metric([*labels, "system"], float(reading.sm_clock_mhz))
        yield clock

    def _amd_label_sets(self, holding: GpuHolding) -> list[list[str]]:
        """AMD's exporter's labels, one set per GPU: a shared GPU's jobs and their distinct
        owners comma-separated (`job_id=""` when none)."""
        gpu = holding.gpu
        host, number = self._where(gpu, device=True)
        owners = ",".join(sorted({job.owner for job in holding.jobs}))
        return [[
            str(number), gpu.serial, gpu.name, host, str(gpu.partition_id),
            gpu.compute_partition.lower(),
            gpu.memory_partition.lower(), gpu.uuid, _ids(holding.jobs), owners,
        ]]  # fmt: skip

    def _queue_families(self) -> Iterator[Metric]:
        gpus, metrics = self._gpus, self._metrics
        pending, running = self._reads.counts()
        yield GaugeMetricFamily("gpuyard_jobs_pending", "Jobs waiting in the queue.", pending)
        yield GaugeMetricFamily("gpuyard_jobs_running", "Jobs running now.", running)
        yield GaugeMetricFamily(
            "gpuyard_gpus", "GPUs this server schedules.", len(gpus.inventory.gpus)
        )
        yield CounterMetricFamily(
            "gpuyard_job_submits", "Jobs accepted since the server started.",
            metrics.submits,
        )  # fmt: skip
        yield _histogram(
            "gpuyard_scheduling_pass_seconds", "Duration of a scheduling pass (decide, record, "
            "launch), for passes the policy ran.", metrics.pass_s.view(),
        )  # fmt: skip
        yield _histogram(
            "gpuyard_submit_to_start_seconds", "Wait from submission to a job's first start.",
            metrics.submit_to_start_s.view(),
        )  # fmt: skip
        yield GaugeMetricFamily(
            "gpuyard_scheduler_lock_hold_max_seconds",
            "Longest hold of the scheduler's lock since the server started (bench/api_latency.py).",
            self._scheduler.lock_hold_max_s,
        )
        monitor = gpus.monitor
        if monitor is not None and monitor.enabled:
            yield CounterMetricFamily(
                "gpuyard_telemetry_cpu_seconds", "CPU time spent sampling GPUs.",
                monitor.sample_cost_s,
            )  # fmt: skip


def _histogram(name: str, doc: str, view: HistogramView) -> HistogramMetricFamily:
    buckets = [("+Inf" if b == float("inf") else repr(float(b)), c) for b, c in view.buckets]
    return HistogramMetricFamily(name, doc, buckets=buckets, sum_value=view.sum)


JOB_LABELS = ("hpc_job", "user", "job_name", "Hostname")


class ProgressCollector(Collector):
    """Each running job's latest progress (`gpuyard.progress()`, the protocol line, bars):
    gpuyard_job_progress_step/_total/_fraction/_rate/_eta_seconds and gpuyard_job_metric{name}
    (each metric's latest value), labelled with the job (`hpc_job`, as the GPU series), its
    owner and name. A value the job has not reported is left out."""

    def __init__(self, progress: ProgressService, hostname: str) -> None:
        self._progress = progress
        self._hostname = hostname

    def collect(self) -> Iterator[Metric]:
        views = self._progress.running_views()
        gauges = (
            ("gpuyard_job_progress_step", "Latest step a running job reported.", "step"),
            ("gpuyard_job_progress_total", "Steps of the job in all, as it reported.", "total"),
            ("gpuyard_job_progress_fraction", "step / total, 0 to 1.", "fraction"),
            ("gpuyard_job_progress_rate", "Steps per second over recent steps.", "rate_per_s"),
            ("gpuyard_job_progress_eta_seconds", "Seconds left at the recent rate.", "eta_s"),
        )
        for name, doc, attr in gauges:
            family = GaugeMetricFamily(name, doc, labels=JOB_LABELS)
            for job, view in views:
                value = getattr(view, attr)
                if value is not None:
                    family.add_metric(self._labels(job.id, job.owner, job.spec.name), float(value))
            yield family
        family = GaugeMetricFamily(
            "gpuyard_job_metric", "Latest value of a metric a running job reported.",
            labels=(*JOB_LABELS, "name"),
        )  # fmt: skip
        for job, view in views:
            labels = self._labels(job.id, job.owner, job.spec.name)
            for metric, value in sorted(view.metrics.items()):
                family.add_metric([*labels, metric], value)
        yield family

    def _labels(self, job_id: int, owner: str, name: str) -> list[str]:
        return [str(job_id), owner, name, self._hostname]


def render_metrics(server: ServerFacade, hostname: str) -> bytes:
    """The Prometheus text exposition of everything above."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        ServerCollector(server.reads, server.gpus, server.scheduler, server.metrics, hostname)
    )
    if server.progress is not None:
        registry.register(ProgressCollector(server.progress, hostname))
    return generate_latest(registry)
