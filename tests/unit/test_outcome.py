"""How a job's end is judged, preemption included."""

from __future__ import annotations

from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.outcome import judge_exit
from gpuyard.domain.states import JobState


def running(stop_intent: JobState | None) -> Job:
    spec = JobSpec(argv=("train",), name="t", workdir="/", time_limit_s=60)
    job = Job(1, spec, "ada", JobState.RUNNING, submitted_at=0.0, stop_intent=stop_intent)
    return job


def test_a_preempted_job_that_checkpoints_and_exits_0_is_requeued_not_done() -> None:
    state, code, reason = judge_exit(running(JobState.PENDING), 0, None, False, False, True)
    assert (state, code, reason) == (JobState.PENDING, None, "Preempted")


def test_a_preempted_job_killed_by_the_stop_is_requeued() -> None:
    assert judge_exit(running(JobState.PENDING), None, 9, False, False, True)[0] is JobState.PENDING


def test_a_job_that_completed_before_the_stop_reached_it_is_completed() -> None:
    state, _, _ = judge_exit(running(JobState.PENDING), 0, None, False, False, False)
    assert state is JobState.COMPLETED


def test_a_preempted_job_that_hit_its_time_limit_meanwhile_timed_out() -> None:
    assert judge_exit(running(JobState.PENDING), None, 15, True, False, True)[0] is JobState.TIMEOUT


def test_a_preempted_job_whose_supervisor_vanished_is_requeued() -> None:
    assert judge_exit(running(JobState.PENDING), None, None, False, True)[0] is JobState.PENDING


def test_without_a_stop_intent_exit_0_completes_and_others_fail() -> None:
    assert judge_exit(running(None), 0, None, False, False)[0] is JobState.COMPLETED
    state, code, reason = judge_exit(running(None), 3, None, False, False)
    assert (state, code) == (JobState.FAILED, 3) and "code 3" in reason
    assert judge_exit(running(JobState.CANCELLED), 0, None, False, False, True)[0] is (
        JobState.CANCELLED
    )
