"""What a webhook is told of a job (issue 26): no reason is null, never the word "None", and a
job that never ran names no node (it said `local` beside the hostnames of jobs that ran)."""

from __future__ import annotations

from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.states import JobState
from gpuyard.domain.webhooks import job_summary


def test_no_reason_is_null_and_a_never_run_job_names_no_node() -> None:
    spec = JobSpec(argv=("true",), name="t", workdir="/w")
    pending = Job(id=3, spec=spec, owner="ada", state=JobState.PENDING, submitted_at=0.0)
    body = job_summary(pending.transition(JobState.CANCELLED, ended_at=1.0))
    assert (body["reason"], body["node"]) == (None, "")
    ran = Job(id=4, spec=spec, owner="ada", state=JobState.COMPLETED, submitted_at=0.0,
              started_at=1.0, ended_at=2.0, node="gpu-box", exit_code=0)  # fmt: skip
    assert (job_summary(ran)["reason"], job_summary(ran)["node"]) == (None, "gpu-box")
    failed = Job(id=5, spec=spec, owner="ada", state=JobState.FAILED, submitted_at=0.0,
                 reason="NonZeroExitCode: exited with code 3")  # fmt: skip
    assert job_summary(failed)["reason"] == "NonZeroExitCode: exited with code 3"
