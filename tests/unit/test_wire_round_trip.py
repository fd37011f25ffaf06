"""Every JobSpec field survives the wire: JobSubmitIn -> JobSpec -> JobOut.

The fields are discovered with `dataclasses.fields`, so a field added to JobSpec fails here
until the wire carries it both ways (or lists it as write-only, with why).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest

from gpuyard.api.convert import WRITE_ONLY_SPEC_FIELDS, job_to_wire, spec_from_wire
from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.states import JobState
from gpuyard.schemas.v1 import JobOut, JobSubmitIn

# Between them, these submissions set every spec field to something other than its default
# (--nodes and --gpu-mem exclude each other, hence two).
SUBMISSIONS: list[dict[str, Any]] = [
    {
        "command": ["python", "train.py", "--lr", "0.1"], "name": "exp-1", "gpus": 4, "cpus": 8,
        "mem": "16G", "time_limit": "2h", "priority": 5, "workdir": "/data/run",
        "env": {"B": "2", "A": "1"}, "preemptible": True, "distributed": "torchrun", "nodes": 2,
        "stop_signal": "USR1", "retries": 3, "retry_on": ["oom", "failed"],
        "warn_signal": "USR2", "warn_before_s": 300, "warn_target": "steps",
    },
    {"command": ["python", "/home/a/t.py"], "workdir": "/data", "gpu_mem": "8G", "gpus": 2,
     "name": "t.py", "script": "print('hi')\n", "script_index": 1,
     "output_path": "out/%x-%A_%a.out", "error_path": "out/%j.err", "ntasks_per_node": 2,
     "ntasks_given": True, "gpus_per_task": 1,
     "dependency": "afterok:3:4?afternotok:5", "array": "0-9%3", "python": "/usr/bin/python3",
     "notify": ["http://127.0.0.1:9/h"], "notify_events": ["begin", "fail"], "gpu_type": "a100"},
    {"command": ["python", "-m", "srv"], "workdir": "/srv", "kind": "service",
     "service_port": 8081, "health_path": "/health", "health_grace_s": 30,
     "container": "/img/srv.sif"},
    {"command": ["bash"], "workdir": "/", "kind": "interactive", "venv": "/opt/venv",
     "hold": True},
]  # fmt: skip
EXPECTED = [
    JobSpec(argv=("python", "train.py", "--lr", "0.1"), name="exp-1", workdir="/data/run", gpus=4,
            cpus=8, mem_mib=16384, time_limit_s=7200, priority=5, env=(("A", "1"), ("B", "2")),
            preemptible=True, distributed="torchrun", nodes=2, stop_signal=10, retries=3,
            retry_on=("failed", "oom"), warn_signal=12, warn_before_s=300,
            warn_target="steps"),
    JobSpec(argv=("python", "/home/a/t.py"), name="t.py", workdir="/data", gpus=2,
            gpu_mem_mib=8192, script="print('hi')\n", script_index=1,
            output_path="out/%x-%A_%a.out", error_path="out/%j.err", ntasks_per_node=2,
            ntasks_given=True, gpus_per_task=1, dependency="afterok:3:4?afternotok:5",
            array_max_running=3, array="0-9%3", python="/usr/bin/python3",
            notify=("http://127.0.0.1:9/h",), notify_events=("begin", "fail"), gpu_type="a100"),
    JobSpec(argv=("python", "-m", "srv"), name="srv", workdir="/srv", kind="service",
            service_port=8081, health_path="/health", health_grace_s=30,
            container="/img/srv.sif"),
    JobSpec(argv=("bash",), name="bash", workdir="/", kind="interactive", venv="/opt/venv",
            hold=True),
]  # fmt: skip
SPEC_FIELDS = [f.name for f in fields(JobSpec)]


def _defaults() -> JobSpec:
    return JobSpec(argv=("x",), name="x", workdir="/")


@pytest.mark.parametrize("field", SPEC_FIELDS)
def test_the_samples_set_every_spec_field(field: str) -> None:
    # Guard: a field left at its default in every sample would survive by accident.
    assert any(getattr(spec, field) != getattr(_defaults(), field) for spec in EXPECTED), field


@pytest.mark.parametrize(("submitted", "expected"), list(zip(SUBMISSIONS, EXPECTED, strict=True)))
def test_every_spec_field_survives_the_wire(submitted: dict[str, Any], expected: JobSpec) -> None:
    spec = spec_from_wire(JobSubmitIn(**submitted))
    assert spec == expected
    job = Job(id=7, spec=spec, owner="alice", state=JobState.PENDING, submitted_at=1.0e9)
    out = JobOut.model_validate(job_to_wire(job, "None", "/log").model_dump(mode="json"))
    names = {"argv": "command", "gpus": "num_gpus"}
    for field in SPEC_FIELDS:
        if field in WRITE_ONLY_SPEC_FIELDS:
            assert names.get(field, field) not in JobOut.model_fields, field
            continue
        value = getattr(spec, field)
        wire = getattr(out, names.get(field, field))
        assert (tuple(wire) if isinstance(wire, list) else wire) == value, field


def test_write_only_fields_are_few_and_explained() -> None:
    assert set(WRITE_ONLY_SPEC_FIELDS) <= set(SPEC_FIELDS)
    assert all(len(why) > 20 for why in WRITE_ONLY_SPEC_FIELDS.values())
