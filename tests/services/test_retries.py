"""Retries and requeues on the live decision path (real journal, scheduler and SQLite, simulated
time): `--retries N` with exponential backoff and `--retry-on` classes, every run kept as an
attempt, NODE_FAIL requeued onto healthy GPUs up to the server's limit and then held."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from gpuyard.domain.job import Job
from gpuyard.domain.retry import REASON_BEGIN_TIME
from gpuyard.domain.states import JobState
from gpuyard.scheduling.policies import make_policy
from gpuyard.services.ports import ExitStatus
from gpuyard.settings import Settings
from tests.services.conftest import MakeRig
from tests.services.live_harness import LiveRig

BACKOFF_S, BACKOFF_MAX_S = 10.0, 25.0


def retry_settings(node_fail_requeues: int = 3) -> Settings:
    return Settings(
        retry_backoff_s=BACKOFF_S, retry_backoff_max_s=BACKOFF_MAX_S,
        node_fail_requeues=node_fail_requeues,
    )  # fmt: skip


def make_rig(tmp_path: Path, gpus: int = 1, node_fail_requeues: int = 3) -> LiveRig:
    """A server on `tmp_path` the test closes itself (its own GPUs and node-fail limit)."""
    settings = retry_settings(node_fail_requeues)
    return LiveRig(tmp_path, make_policy("fifo", for_server=True), gpus=gpus, settings=settings)


@pytest.fixture
def rig(live_rig: MakeRig) -> LiveRig:
    return live_rig("fifo", gpus=1, settings=retry_settings())


def end_run(rig: LiveRig, job_id: int, status: ExitStatus) -> None:
    """The job's current run ends now as `status` says; the controller hears of it."""
    del rig.processes.runs[job_id]
    assert rig.processes.on_exit is not None
    rig.processes.on_exit(job_id, status)
    rig.settle()


def run_to_end(rig: LiveRig, job_id: int, exit_codes: list[int], limit: int = 50) -> Job:
    """Let time pass event by event; each run of the job ends after its work with the next of
    `exit_codes` (then 0), until the job ends for good."""
    codes = list(exit_codes)
    for _ in range(limit):
        if rig.state(job_id).is_terminal:
            return rig.job(job_id)
        next_at = rig.next_time()
        assert next_at < math.inf, "nothing more would ever happen"
        rig.now = next_at
        started = rig.processes.runs.get(job_id)
        if started is not None and started + rig.processes.work_s[job_id] <= rig.now:
            end_run(rig, job_id, ExitStatus(exit_code=codes.pop(0) if codes else 0,
                                            ended_at=rig.now))  # fmt: skip
        else:
            rig.settle()
    raise AssertionError(f"job {job_id} did not end")


def test_a_job_that_fails_twice_then_succeeds_with_3_retries_completes_with_both_attempts(
    rig: LiveRig,
) -> None:
    job = rig.submit(5, gpus=1, retries=3)
    rig.settle()
    done = run_to_end(rig, job.id, [1, 3])
    assert done.state is JobState.COMPLETED and done.exit_code == 0
    first, second = done.attempts
    assert [(a.number, a.state, a.exit_code) for a in done.attempts] == [
        (1, JobState.FAILED, 1), (2, JobState.FAILED, 3),
    ]  # fmt: skip
    assert first.reason.startswith("NonZeroExitCode") and first.gpus == (0,)
    # Each retry started no earlier than its backoff: 10 s, then 20 s (base · 2^(n-1)).
    assert second.started_at >= first.ended_at + BACKOFF_S
    assert done.started_at is not None and done.started_at >= second.ended_at + 2 * BACKOFF_S
    assert done.restarts == 2  # GPUYARD_RESTART_COUNT of the last run
    assert done.attained_gpu_s == pytest.approx(10.0)  # 1 GPU x 5 s in each earlier run


def test_a_job_in_backoff_waits_with_reason_begintime_and_its_gpu_is_free_meanwhile(
    rig: LiveRig,
) -> None:
    job = rig.submit(5, gpus=1, retries=1)
    rig.settle()
    rig.now = 5
    end_run(rig, job.id, ExitStatus(exit_code=1, ended_at=5))
    waiting = rig.job(job.id)
    assert waiting.state is JobState.PENDING and waiting.not_before == 5 + BACKOFF_S
    assert rig.reads.reason(waiting) == REASON_BEGIN_TIME
    # Its GPU is free meanwhile: a job behind it starts.
    other = rig.submit(3, gpus=1)
    rig.settle()
    assert rig.state(other.id) is JobState.RUNNING
    assert rig.scheduler.next_pass_at == 5 + BACKOFF_S  # the pass is woken when it ends


def test_the_controller_loop_wakes_when_a_backoff_ends_not_a_period_later(rig: LiveRig) -> None:
    job = rig.submit(5, gpus=1, retries=1)
    rig.settle()
    end_run(rig, job.id, ExitStatus(exit_code=1, ended_at=0))
    rig.now = BACKOFF_S - 0.25
    assert rig.controller._wait_s(1.0) == pytest.approx(0.25)
    rig.now = BACKOFF_S + 5  # a time it was woken for already: never a busy loop on it
    assert rig.controller._wait_s(1.0) == 1.0
    rig.settle()
    assert rig.state(job.id) is JobState.RUNNING


def test_backoff_is_capped_at_the_servers_maximum(rig: LiveRig) -> None:
    job = rig.submit(1, gpus=1, retries=4)
    rig.settle()
    done = run_to_end(rig, job.id, [1, 1, 1, 1])
    assert done.started_at is not None
    starts = [a.started_at for a in done.attempts[1:]] + [done.started_at]
    waits = [start - a.ended_at for a, start in zip(done.attempts, starts, strict=True)]
    assert waits == [10.0, 20.0, BACKOFF_MAX_S, BACKOFF_MAX_S]


def test_retries_spent_end_the_job_failed_with_every_attempt(rig: LiveRig) -> None:
    job = rig.submit(2, gpus=1, retries=2)
    rig.settle()
    done = run_to_end(rig, job.id, [7, 7, 9])
    assert (done.state, done.exit_code) == (JobState.FAILED, 9)
    assert [a.state for a in done.attempts] == [JobState.FAILED, JobState.FAILED]
    assert len({a.started_at for a in done.attempts} | {done.started_at}) == 3


def test_without_retries_a_failure_ends_the_job(rig: LiveRig) -> None:
    job = rig.submit(2, gpus=1)
    rig.settle()
    done = run_to_end(rig, job.id, [1])
    assert (done.state, done.attempts) == (JobState.FAILED, ())


def test_a_timeout_is_retried_only_when_retry_on_names_it(rig: LiveRig) -> None:
    plain = rig.submit(2, gpus=1, retries=2)
    rig.settle()
    rig.now = 2
    end_run(rig, plain.id, ExitStatus(exit_code=None, signal=15, timed_out=True, ended_at=2))
    assert rig.state(plain.id) is JobState.TIMEOUT
    asked = rig.submit(2, gpus=1, retries=2, retry_on=("timeout",))
    rig.settle()
    rig.now = 4
    end_run(rig, asked.id, ExitStatus(exit_code=None, signal=15, timed_out=True, ended_at=4))
    job = rig.job(asked.id)
    assert job.state is JobState.PENDING and job.attempts[0].state is JobState.TIMEOUT


def test_an_oom_kill_is_not_retried_unless_asked(rig: LiveRig) -> None:
    oom = ExitStatus(exit_code=None, signal=9, ended_at=2, out_of_memory=True,
                     reason="OutOfMemory: host memory")  # fmt: skip
    plain = rig.submit(2, gpus=1, retries=3)
    rig.settle()
    rig.now = 2
    end_run(rig, plain.id, oom)
    assert rig.state(plain.id) is JobState.OUT_OF_MEMORY
    asked = rig.submit(2, gpus=1, retries=3, retry_on=("failed", "oom"))
    rig.settle()
    end_run(rig, asked.id, oom)
    assert rig.job(asked.id).attempts[0].state is JobState.OUT_OF_MEMORY


def test_a_command_that_cannot_start_is_not_retried_unless_asked(
    rig: LiveRig, tmp_path: Path
) -> None:
    log = tmp_path / "cannot-run.log"
    log.write_text("gpuyard: cannot run 'trian.py' in '/': No such file or directory\n")
    rig.processes.log_path = lambda job_id: str(log)  # type: ignore[method-assign]
    plain = rig.submit(2, gpus=1, retries=3)
    rig.settle()
    end_run(rig, plain.id, ExitStatus(exit_code=127, ended_at=0))
    ended = rig.job(plain.id)
    assert (ended.state, ended.exit_code) == (JobState.FAILED, 127)
    assert ended.reason == "LaunchFailed: cannot run 'trian.py' in '/': No such file or directory"
    asked = rig.submit(2, gpus=1, retries=3, retry_on=("launch",))
    rig.settle()
    end_run(rig, asked.id, ExitStatus(exit_code=127, ended_at=0))
    assert rig.job(asked.id).state is JobState.PENDING
    # A plain non-zero exit is not what `--retry-on launch` asked for.
    rig.now = BACKOFF_S
    rig.settle()
    end_run(rig, asked.id, ExitStatus(exit_code=1, ended_at=BACKOFF_S))
    assert rig.state(asked.id) is JobState.FAILED


def test_a_cancelled_job_is_never_retried(rig: LiveRig) -> None:
    job = rig.submit(100, gpus=1, retries=3)
    rig.settle()
    rig.verbs.cancel(job.id, rig.actor)
    rig.settle()
    assert rig.state(job.id) is JobState.CANCELLED


def test_a_job_cancelled_in_its_backoff_ends_there(rig: LiveRig) -> None:
    job = rig.submit(5, gpus=1, retries=2)
    rig.settle()
    end_run(rig, job.id, ExitStatus(exit_code=1, ended_at=0))
    rig.verbs.cancel(job.id, rig.actor)
    rig.advance(BACKOFF_S + 1)
    assert rig.state(job.id) is JobState.CANCELLED
    assert job.id not in rig.processes.runs


def test_a_user_hold_during_backoff_outlasts_it_and_a_release_before_it_ends_waits(
    rig: LiveRig,
) -> None:
    job = rig.submit(5, gpus=1, retries=2)
    rig.settle()
    end_run(rig, job.id, ExitStatus(exit_code=1, ended_at=0))
    rig.verbs.hold(job.id, rig.actor)
    rig.advance(BACKOFF_S + 1)
    assert rig.state(job.id) is JobState.PENDING  # held: the backoff's end does not start it
    rig.verbs.release(job.id, rig.actor)
    rig.settle()
    assert rig.state(job.id) is JobState.RUNNING
    # Released before its backoff ends: it still waits for it.
    end_run(rig, job.id, ExitStatus(exit_code=1, ended_at=rig.now))
    rig.verbs.hold(job.id, rig.actor)
    rig.verbs.release(job.id, rig.actor)
    rig.settle()
    assert rig.reads.reason(rig.job(job.id)) == REASON_BEGIN_TIME
    rig.advance(rig.now + 2 * BACKOFF_S)
    assert rig.state(job.id) is JobState.RUNNING


def test_a_preemption_is_kept_as_an_attempt(tmp_path: Path) -> None:
    live = LiveRig(tmp_path, make_policy("default", for_server=True), gpus=1)
    try:
        job = live.submit(100, gpus=1)
        live.settle()
        live.now = 3
        live.verbs.requeue(job.id, live.actor)
        live.settle()
        requeued = live.job(job.id)
        (attempt,) = requeued.attempts
        assert (attempt.state, attempt.reason, attempt.started_at, attempt.ended_at) == (
            JobState.PENDING, "Requeued by user", 0.0, 3.0,
        )  # fmt: skip
        assert requeued.restarts == 1
    finally:
        live.close()


# -- NODE_FAIL ----------------------------------------------------------------------------------


def broken(rig: LiveRig, gpu: int) -> None:
    """The health guard's drain of a broken GPU: the jobs on it are stopped NODE_FAIL."""
    rig.drains.drain(gpu, f"GPU {gpu} fell off the bus", "auto")
    rig.settle()


def test_a_node_failure_requeues_the_job_onto_a_healthy_gpu_without_retries(
    tmp_path: Path,
) -> None:
    rig = make_rig(tmp_path, gpus=2)
    try:
        job = rig.submit(100, gpus=1)
        rig.settle()
        first_gpu = rig.job(job.id).gpus[0]
        rig.now = 4
        broken(rig, first_gpu)
        moved = rig.job(job.id)
        assert moved.state is JobState.RUNNING and moved.gpus == (1 - first_gpu,)
        (attempt,) = moved.attempts
        assert (attempt.state, attempt.gpus) == (JobState.NODE_FAIL, (first_gpu,))
        assert "fell off the bus" in attempt.reason
        assert moved.not_before is None  # no backoff: the GPU is out of service
    finally:
        rig.close()


def test_past_the_node_fail_limit_the_job_is_held_with_the_reason_until_released(
    tmp_path: Path,
) -> None:
    rig = make_rig(tmp_path, gpus=3, node_fail_requeues=2)
    try:
        job = rig.submit(100, gpus=1)
        rig.settle()
        for _ in range(3):
            broken(rig, rig.job(job.id).gpus[0])
        held = rig.job(job.id)
        assert held.state is JobState.PENDING and held.held
        assert [a.state for a in held.attempts] == [JobState.NODE_FAIL] * 3
        reason = rig.reads.reason(held)
        assert reason.startswith("NodeFailLimit: 3 node failures, more than the 2 requeues")
        assert "fell off the bus" in reason and f"gpuyard release {job.id}" in reason
        for gpu in range(3):
            rig.drains.resume(gpu)
        rig.settle()
        assert rig.state(job.id) is JobState.PENDING  # held: resumed GPUs do not start it
        rig.verbs.release(job.id, rig.actor)
        rig.settle()
        assert rig.state(job.id) is JobState.RUNNING
    finally:
        rig.close()


def test_with_no_node_fail_requeues_a_node_failure_ends_the_job(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, gpus=2, node_fail_requeues=0)
    try:
        job = rig.submit(100, gpus=1, retries=3)
        rig.settle()
        broken(rig, rig.job(job.id).gpus[0])
        assert rig.state(job.id) is JobState.NODE_FAIL
    finally:
        rig.close()


# -- a restart -----------------------------------------------------------------------------------


def test_attempts_backoff_and_a_node_fail_hold_survive_a_restart(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, gpus=2, node_fail_requeues=1)
    retried = rig.submit(5, gpus=1, retries=2)
    failing = rig.submit(100, gpus=1)
    rig.settle()
    rig.now = 5
    end_run(rig, retried.id, ExitStatus(exit_code=1, ended_at=5))
    broken(rig, rig.job(failing.id).gpus[0])
    broken(rig, rig.job(failing.id).gpus[0])
    before = {j: rig.job(j) for j in (retried.id, failing.id)}
    assert before[failing.id].held
    for gpu in range(2):
        rig.drains.resume(gpu)
    rig.close()

    again = make_rig(tmp_path, gpus=2, node_fail_requeues=1)
    try:
        again.now = 6
        again.settle()
        for job_id, job in before.items():
            assert again.job(job_id).attempts == job.attempts
        assert again.reads.reason(again.job(retried.id)) == REASON_BEGIN_TIME
        assert again.reads.reason(again.job(failing.id)).startswith("NodeFailLimit")
        again.advance(5 + BACKOFF_S)
        assert again.state(retried.id) is JobState.RUNNING
        assert again.state(failing.id) is JobState.PENDING
    finally:
        again.close()
