"""How a run's end is settled (domain/retry.py) and `--signal SIG@SECONDS` (domain/signals.py)."""

from __future__ import annotations

import pytest

from gpuyard.domain.errors import InvalidRequest
from gpuyard.domain.job import REASON_HELD, Attempt, Job, JobSpec
from gpuyard.domain.retry import (
    MAX_ATTEMPTS_KEPT,
    RetryRules,
    failure_class,
    hold_reason,
    settle_end,
)
from gpuyard.domain.signals import parse_warning
from gpuyard.domain.states import JobState


def running(**spec: object) -> Job:
    return Job(
        7, JobSpec(("train",), "t", "/", gpus=2, **spec), "ada", JobState.RUNNING, 0.0,  # type: ignore[arg-type]
        gpus=(1, 3), started_at=100.0, node="n1",
    )  # fmt: skip


def test_the_backoff_doubles_from_the_base_up_to_the_cap() -> None:
    rules = RetryRules(backoff_s=10, backoff_max_s=600)
    assert [rules.backoff_for(n) for n in (1, 2, 3, 6, 7, 500)] == [10, 20, 40, 320, 600, 600]
    assert RetryRules(backoff_s=0.2, backoff_max_s=1).backoff_for(2) == 0.4


@pytest.mark.parametrize(
    ("state", "reason", "kind"),
    [(JobState.FAILED, "NonZeroExitCode: exited with code 1", "failed"),
     (JobState.FAILED, "Signal: killed by SIGSEGV", "failed"),
     (JobState.FAILED, "LaunchFailed: cannot run 'x' in '/': No such file", "launch"),
     (JobState.TIMEOUT, "TimeLimit: stopped after its limit of 1:00", "timeout"),
     (JobState.OUT_OF_MEMORY, "OutOfMemory: ...", "oom"),
     (JobState.COMPLETED, "None", None), (JobState.CANCELLED, "Cancelled by user", None),
     (JobState.NODE_FAIL, "NodeFail: GPU 1 fell off the bus", None)],
)  # fmt: skip
def test_each_end_has_its_class(state: JobState, reason: str, kind: str | None) -> None:
    assert failure_class(state, reason) == kind


def test_a_retried_failure_goes_back_to_pending_with_the_run_kept_and_its_gpus_freed() -> None:
    job = settle_end(running(retries=2), JobState.FAILED, 3, "NonZeroExitCode", 160.0,
                     RetryRules())  # fmt: skip
    assert (job.state, job.gpus, job.exit_code, job.not_before) == (
        JobState.PENDING, (), None, 170.0,
    )  # fmt: skip
    assert job.attempts == (
        Attempt(1, 100.0, 160.0, JobState.FAILED, 3, "NonZeroExitCode", "n1", (1, 3)),
    )
    assert (job.restarts, job.attained_gpu_s) == (1, 120.0)  # 2 GPUs x 60 s


def test_a_failure_outside_retry_on_ends_the_job() -> None:
    job = settle_end(running(retries=2, retry_on=("timeout",)), JobState.FAILED, 1, "x", 160.0,
                     RetryRules())  # fmt: skip
    assert (job.state, job.exit_code, job.ended_at, job.attempts) == (
        JobState.FAILED, 1, 160.0, (),
    )  # fmt: skip


def test_node_failures_are_requeued_up_to_the_limit_then_held_with_why() -> None:
    rules = RetryRules(node_fail_requeues=1)
    once = settle_end(running(), JobState.NODE_FAIL, None, "NodeFail: GPU 1 off the bus", 110.0,
                      rules)  # fmt: skip
    assert (once.state, once.held, once.not_before) == (JobState.PENDING, False, None)
    again = once.transition(JobState.RUNNING, gpus=(0,), started_at=120.0)
    held = settle_end(again, JobState.NODE_FAIL, None, "NodeFail: GPU 0 XID 79", 130.0, rules)
    assert held.state is JobState.PENDING and held.held
    assert hold_reason(held) == held.reason
    assert held.reason.startswith("NodeFailLimit: 2 node failures, more than the 1 requeues")
    assert "GPU 0 XID 79" in held.reason
    assert hold_reason(once.with_changes(held=True)) == REASON_HELD


def test_the_oldest_preemptions_are_dropped_past_the_kept_runs() -> None:
    failed = Attempt(1, 1.0, 2.0, JobState.FAILED, 1)
    preempted = [Attempt(n, 2.0, 3.0, JobState.PENDING) for n in range(2, MAX_ATTEMPTS_KEPT + 1)]
    many = (failed, *preempted)
    job = settle_end(
        running(retries=5).with_changes(attempts=many), JobState.FAILED, 1, "x", 160.0,
        RetryRules(),
    )  # fmt: skip
    assert len(job.attempts) == MAX_ATTEMPTS_KEPT
    assert job.attempts[0] == failed  # a counted retry is never dropped
    assert job.attempts[1].number == 3  # the oldest preemption went
    assert job.attempts[-1].number == MAX_ATTEMPTS_KEPT + 1


def test_a_signal_before_the_time_limit_is_sig_at_seconds() -> None:
    assert parse_warning("USR1@120") == (10, 120)
    assert parse_warning(" SIGUSR2@5 ") == (12, 5)
    for bad, says in (("USR1@", "whole seconds"), ("USR1@-3", "whole seconds"),
                      ("USR1@0", "whole seconds"), ("NOPE@10", "is not a signal"),
                      ("B:USR1@60", "only the signal")):  # fmt: skip
        with pytest.raises(InvalidRequest, match=says):
            parse_warning(bad)


def test_a_machine_lost_under_a_job_before_its_drain_is_requeued_after_a_backoff() -> None:
    lost = settle_end(running(), JobState.NODE_FAIL, None, "NodeLost: node1", 110.0,
                      RetryRules(), out_of_service=False)  # fmt: skip
    assert (lost.state, lost.not_before) == (JobState.PENDING, 120.0)
