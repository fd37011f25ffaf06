"""Which GPU readings take a GPU out of service, and only once per failure."""

from __future__ import annotations

from types import MappingProxyType

from gpuyard.services.health import HealthGuard, failure_of
from gpuyard.services.ports import GpuReading
from gpuyard.services.telemetry import GpuTelemetry, TelemetrySnapshot


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
