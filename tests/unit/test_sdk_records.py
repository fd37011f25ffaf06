"""The SDK's `Job` reads the API's JobOut: each typed attribute is a JobOut field of the same
type, so a field renamed or retyped on the wire cannot leave the SDK answering something else."""

from __future__ import annotations

import typing

from gpuyard.schemas.v1 import JobOut
from gpuyard.sdk.records import Job

DERIVED = {"ended", "ok"}  # computed from `state`, not fields of the wire


def _attributes() -> dict[str, property]:
    return {k: v for k, v in vars(Job).items() if isinstance(v, property)}


def test_every_attribute_is_a_field_of_job_out_with_its_type() -> None:
    attributes = _attributes()
    assert {"id", "state", "exit_code", "reason", "gpus", "node", "started_at"} <= set(attributes)
    for name, prop in attributes.items():
        if name in DERIVED:
            continue
        assert name in JobOut.model_fields, f"Job.{name} is no JobOut field"
        said = typing.get_type_hints(prop.fget, globalns=vars(typing))["return"]
        assert said == JobOut.model_fields[name].annotation, name


def test_a_record_answers_its_fields_typed_and_stays_a_dict() -> None:
    wire = {"id": 7, "name": "t", "state": "FAILED", "exit_code": 3, "reason": "NonZeroExitCode",
            "gpus": [1], "node": "n1", "runtime_s": 2, "array_task_id": None}  # fmt: skip
    job = Job(wire)
    assert (job.id, job.state, job.exit_code, job.gpus, job.runtime_s) == (7, "FAILED", 3, [1], 2.0)
    assert (job.ended, job.ok, job.array_task_id) == (True, False, None)
    assert job == wire and job["reason"] == "NonZeroExitCode"
    assert repr(job).startswith("Job(id=7, name='t', state='FAILED', exit_code=3")
