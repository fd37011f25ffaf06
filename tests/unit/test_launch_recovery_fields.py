"""What issue 12 added to a launch: the plan carries the warning signal and the checkpoint
folder (the same for every run of a job, none shared with another job), and a status's
`log_dropped_bytes` is checked like every other field a job could have forged."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from gpuyard.adapters.executor.launch_file import launch_instructions
from gpuyard.adapters.executor.status import MAX_DROPPED_BYTES, parse_status
from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.states import JobState
from gpuyard.services.launch.plan import launch_plan

LOG = "/state/jobs/9/output.log"


def _job(job_id: int = 9, restarts: int = 0) -> Job:
    spec = JobSpec(argv=("python", "t.py"), name="t", workdir="/w", time_limit_s=600,
                   warn_signal=10, warn_before_s=120)  # fmt: skip
    return Job(job_id, spec, "ada", JobState.RUNNING, submitted_at=1.0, restarts=restarts)


def test_the_plan_and_launch_file_carry_the_warning_and_the_checkpoint_folder() -> None:
    plan = launch_plan(_job(), {}, None, None, LOG)
    assert (plan.warn_signal, plan.warn_before_s) == (10, 120)
    assert plan.checkpoint_dir == plan.env["GPUYARD_CHECKPOINT_DIR"] == "/state/jobs/9/checkpoint"
    again = launch_plan(_job(restarts=3), {}, None, None, LOG)  # a later run: the same folder
    assert again.env["GPUYARD_CHECKPOINT_DIR"] == plan.checkpoint_dir
    other = launch_plan(_job(10), {}, None, None, "/state/jobs/10/output.log")  # a restart's job
    assert other.checkpoint_dir != plan.checkpoint_dir
    # An --env of the same name does not move it: the executor makes the plan's folder.
    spec = replace(_job().spec, env=(("GPUYARD_CHECKPOINT_DIR", "/elsewhere"),))
    sent = launch_plan(replace(_job(), spec=spec), {}, None, None, LOG)
    assert sent.env["GPUYARD_CHECKPOINT_DIR"] == sent.checkpoint_dir == plan.checkpoint_dir
    written = launch_instructions(plan, Path("/state/jobs/9"), 1.0, "m")
    assert (written["warn_signal"], written["warn_before_s"]) == (10, 120)


def _status(**fields: object) -> str:
    base = {"exit_code": 0, "signal": None, "timed_out": False, "ended_at": 1030.0}
    return json.dumps({**base, **fields})


def test_a_status_carries_the_bytes_the_log_lost_checked() -> None:
    assert parse_status(_status(), 1000.0, 1060.0).log_dropped_bytes == 0  # type: ignore[union-attr]
    found = parse_status(_status(log_dropped_bytes=4096), 1000.0, 1060.0)
    assert found is not None and found.log_dropped_bytes == 4096
    huge = parse_status(_status(log_dropped_bytes=2**40), 1000.0, 1060.0)
    assert huge is not None and huge.log_dropped_bytes == MAX_DROPPED_BYTES
    for bad in (-1, "12", True, None, 1.5):
        assert parse_status(_status(log_dropped_bytes=bad), 1000.0, 1060.0) is None, bad
