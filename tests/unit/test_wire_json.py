"""The job list's encoder (api/wire_json.py) gives the same bytes as JobOut's own `dump_json`,
for jobs in every shape a list holds: pending, running with GPU stats and a service's health,
finished with steps and earlier attempts, every spec field set (the wire round-trip test's
submissions). A field added to JobOut or to a record in it is covered without listing it here."""

from __future__ import annotations

import dataclasses
import types

import pytest
from pydantic import TypeAdapter
from tests.unit.test_wire_round_trip import SUBMISSIONS

from gpuyard.api import convert
from gpuyard.api.convert import job_fields, job_to_wire, spec_from_wire
from gpuyard.api.wire_json import WireList
from gpuyard.domain.job import Attempt, Job, JobStep
from gpuyard.domain.states import JobState
from gpuyard.schemas.v1 import JobOut, JobSubmitIn
from gpuyard.services.launch.service_check import HealthState
from gpuyard.services.machine.telemetry import JobGpuStats

T0 = 1_780_000_000.25


def _jobs() -> list[tuple[Job, dict[str, object]]]:
    """(job, the extra arguments its answer is built with)."""
    specs = [spec_from_wire(JobSubmitIn(**body)) for body in SUBMISSIONS]
    pending = Job(id=1, spec=specs[0], owner="alice", state=JobState.PENDING, submitted_at=T0)
    running = dataclasses.replace(
        pending, id=2, spec=specs[2], state=JobState.RUNNING, started_at=T0 + 5, gpus=(0, 3),
        node="gpu-a", attained_gpu_s=12.5,
    )  # fmt: skip
    finished = dataclasses.replace(
        running, id=3, spec=specs[1], state=JobState.FAILED, ended_at=T0 + 65.125, exit_code=3,
        restarts=1, max_rss_kib=2048, cpu_time_s=41.5,
        steps=(JobStep(0, "python", 2, T0 + 6, T0 + 20, 0),
               JobStep(1, "python", 2, T0 + 21, None, None, 9)),
        attempts=(Attempt(1, T0 + 1, T0 + 4, JobState.NODE_FAIL, None, "NodeFail", "gpu-b",
                          (1,)),),
    )  # fmt: skip
    stats = JobGpuStats(
        samples=10, util_sum_pct=655.0, util_peak_pct=99, memory_peak_mib=30_000, gpu_s=120.0,
        sampled_s=60.0, memory_peak_per_gpu_mib=15_000, energy_j=1234.5678,
    )  # fmt: skip
    health = HealthState("healthy", T0 + 7, T0 + 60, None, 0)
    return [
        (pending, {"reason": "Priority", "log_path": "", "estimated_start": T0 + 3600}),
        (running, {"reason": "None", "log_path": "/s/jobs/2/output.log", "gpu_stats": stats,
                   "idle_since": T0 + 30, "service_health": health}),
        (finished, {"reason": "NonZeroExitCode", "log_path": "/s/jobs/3/output.log",
                    "gpu_stats": stats, "estimate_assumes": "preemption"}),
    ]  # fmt: skip


@pytest.mark.parametrize("which", [0, 1, 2, None], ids=["pending", "running", "finished", "all"])
def test_the_list_encoder_writes_the_models_own_bytes(
    which: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A running job's runtime and GPU-seconds are read off the clock: the same instant for both.
    monkeypatch.setattr(convert, "time", types.SimpleNamespace(time=lambda: T0 + 100))
    jobs = _jobs() if which is None else [_jobs()[which]]
    models = [job_to_wire(job, **extra) for job, extra in jobs]  # type: ignore[arg-type]
    fields = [job_fields(job, **extra, plain=True) for job, extra in jobs]  # type: ignore[arg-type]
    expected = TypeAdapter(list[JobOut]).dump_json(models)
    assert WireList(JobOut).dump_json(fields) == expected


def test_a_required_field_left_out_is_an_error_not_a_silent_gap() -> None:
    job, extra = _jobs()[0]
    fields = job_fields(job, **extra, plain=True)  # type: ignore[arg-type]
    del fields["owner"]
    with pytest.raises(KeyError, match="owner"):
        WireList(JobOut).dump_json([fields])


@pytest.mark.parametrize("hint", [None, "--gpu-mem 30G fits your last runs"])
def test_one_record_is_written_as_its_model_writes_it(
    hint: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The submit's answer (one job, with the submit's advice) is encoded this way.
    monkeypatch.setattr(convert, "time", types.SimpleNamespace(time=lambda: T0 + 100))
    for job, extra in _jobs():
        model = job_to_wire(job, **extra)  # type: ignore[arg-type]
        model.hint = hint
        fields = job_fields(job, **extra, plain=True)  # type: ignore[arg-type]
        fields["hint"] = hint
        assert WireList(JobOut).dump_one(fields) == model.model_dump_json().encode()
