"""Which GPU readings take a GPU out of service, and only once per failure."""

from __future__ import annotations

from types import MappingProxyType

from gpuyard.services.machine.gpu_health import HealthGuard, failure_of
from gpuyard.services.machine.telemetry import GpuTelemetry, TelemetrySnapshot
from gpuyard.services.ports import GpuReading


def snapshot(*readings: GpuReading) -> TelemetrySnapshot:
    return TelemetrySnapshot(
        1.0, MappingProxyType({r.index: GpuTelemetry(r, None) for r in readings})
    )


def test_resets_needed_are_failures_and_application_xids_are_not() -> None:
    assert "fallen off the bus" in (failure_of(GpuReading(0, last_xid=79, xid_events=1)) or "")
    assert "uncorrectable ECC" in (failure_of(GpuReading(0, ecc_uncorrected=2)) or "")
    assert "cannot be read" in (failure_of(GpuReading(0, error="GPU is lost")) or "")
    assert failure_of(GpuReading(0, last_xid=13, xid_events=1)) is None  # a job's own bug
    assert failure_of(GpuReading(0, util_pct=100, temperature_c=90)) is None


def test_the_guard_drains_once_per_failure_and_again_for_a_new_one() -> None:
    drained: list[tuple[int, str, str]] = []
    guard = HealthGuard(lambda i, why, source: drained.append((i, why, source)))
    guard.check(snapshot(GpuReading(0), GpuReading(1, last_xid=79, xid_events=1)))
    guard.check(snapshot(GpuReading(0), GpuReading(1, last_xid=79, xid_events=1)))
    assert [(i, s) for i, _, s in drained] == [(1, "auto")]
    guard.check(snapshot(GpuReading(0), GpuReading(1, last_xid=79, xid_events=2)))  # new event
    assert len(drained) == 2


def test_free_gpus_with_foreign_memory_over_the_threshold_are_busy() -> None:
    from gpuyard.services.machine.gpu_health import foreign_memory
    from gpuyard.services.machine.telemetry import AttributedProcess

    def gpu(index: int, *mem: int) -> GpuTelemetry:
        procs = tuple(AttributedProcess(100 + i, m, None) for i, m in enumerate(mem))
        return GpuTelemetry(GpuReading(index), procs if mem else None)

    snap = TelemetrySnapshot(
        1.0, MappingProxyType({0: gpu(0, 3000), 1: gpu(1, 100, 100), 2: gpu(2), 3: gpu(3, 900)})
    )
    busy = foreign_memory(snap, held={3}, threshold_mib=256)
    assert list(busy) == [0]  # 1: under the threshold; 2: processes not listed; 3: a job's
    assert "3000 MiB" in busy[0] and "pid 100" in busy[0]


def test_hot_or_throttled_gpus_are_named_with_why() -> None:
    from gpuyard.services.machine.gpu_health import hot_gpus

    snap = snapshot(
        GpuReading(0, temperature_c=88),
        GpuReading(1, temperature_c=60, throttle_reasons=("gpu_idle",)),
        GpuReading(2, temperature_c=70, throttle_reasons=("sw_power_cap",)),
        GpuReading(3),
    )
    hot = hot_gpus(snap, 85)
    assert sorted(hot) == [0, 2]
    assert hot[0] == "88 C (limit 85 C)" and "sw_power_cap" in hot[2]
