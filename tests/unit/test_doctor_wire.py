"""The doctor's facts survive their trip as JSON (agent -> server -> CLI, `doctor/wire.py`):
tuples, enums and nested facts come back equal, and a field one side does not know is ignored."""

from __future__ import annotations

import json

from gpuyard.doctor.checks import run_checks
from gpuyard.doctor.model import (
    AmdGpuFacts,
    Check,
    DiskFacts,
    DriverFacts,
    Facts,
    FrameworkBuild,
    GpuFacts,
    PythonFacts,
    RocmFacts,
    Status,
)  # fmt: skip
from gpuyard.doctor.wire import facts_from_json, facts_to_json

FACTS = Facts(
    driver=DriverFacts(driver_version="535.104", cuda_version=(12, 2),
                       gpus=(GpuFacts(0, "NVIDIA H200", (9, 0), True),
                             GpuFacts(1, "NVIDIA H200", None, None))),
    python=PythonFacts("/usr/bin/python3", "3.12.1", frameworks=(
        FrameworkBuild("torch", True, "2.4.0", cuda="12.4", archs=("sm_80", "sm_90")),
        FrameworkBuild("jax", False),
    )),
    disk=DiskFacts("/srv/gpuyard", free_bytes=5 << 30, total_bytes=100 << 30),
    notes=(Check("note", Status.WARN, "a note", "a hint"),),
    rocm=RocmFacts(rocm_version="6.4.1", gpus=(AmdGpuFacts(0, "MI300X", "gfx942"),)),
    confinement="none: --mem, --cpus and GPU devices are advisory on this machine",
)  # fmt: skip


def test_facts_come_back_equal_through_json() -> None:
    back = facts_from_json(json.loads(json.dumps(facts_to_json(FACTS))))
    assert back == FACTS
    assert run_checks(back) == run_checks(FACTS)
    assert any(c.name == "job limits" and c.status is Status.WARN for c in run_checks(back))


def test_a_newer_agents_fields_are_ignored_and_missing_ones_defaulted() -> None:
    data = facts_to_json(FACTS)
    data["driver"]["fabric"] = "nvlink"  # a field of a newer agent
    data["future"] = 1
    del data["disk"]["total_bytes"]
    back = facts_from_json(data)
    assert back.driver == FACTS.driver and back.disk is not None
    assert back.disk.total_bytes is None and back.disk.free_bytes == 5 << 30
