"""Job states in Slurm's words, and the one table that says which changes are allowed."""

from __future__ import annotations

import pytest

from gpuyard.domain.errors import Conflict
from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.states import TERMINAL_STATES, TRANSITIONS, JobState, check_transition

FINISHED = [JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT]


def make_job(state: JobState = JobState.PENDING, version: int = 1) -> Job:
    spec = JobSpec(argv=("python", "train.py"), name="train", workdir="/tmp", gpus=2)
    return Job(id=7, spec=spec, owner="ada", state=state, submitted_at=100.0, version=version)


def test_every_state_has_a_row_in_the_table() -> None:
    assert set(TRANSITIONS) == set(JobState)


def test_state_values_are_slurm_words() -> None:
    for state in JobState:
        assert state.value == state.name
        assert state.value.isupper()


@pytest.mark.parametrize("state", FINISHED)
def test_finished_states_are_terminal_and_have_no_exits(state: JobState) -> None:
    assert state.is_terminal
    assert state in TERMINAL_STATES
    assert TRANSITIONS[state] == frozenset()
    for target in JobState:
        with pytest.raises(Conflict):
            check_transition(1, state, target)


@pytest.mark.parametrize("state", [JobState.PENDING, JobState.RUNNING])
def test_live_states_are_not_terminal(state: JobState) -> None:
    assert not state.is_terminal
    assert TRANSITIONS[state]


@pytest.mark.parametrize(
    ("current", "target"),
    [
        (JobState.PENDING, JobState.RUNNING),
        (JobState.PENDING, JobState.CANCELLED),
        (JobState.RUNNING, JobState.COMPLETED),
        (JobState.RUNNING, JobState.FAILED),
        (JobState.RUNNING, JobState.CANCELLED),
        (JobState.RUNNING, JobState.TIMEOUT),
        (JobState.RUNNING, JobState.PENDING),  # requeue: the process never began
    ],
)
def test_allowed_transitions(current: JobState, target: JobState) -> None:
    check_transition(1, current, target)  # does not raise


@pytest.mark.parametrize(
    ("current", "target"),
    [
        (JobState.PENDING, JobState.COMPLETED),  # never ran, cannot have completed
        (JobState.PENDING, JobState.FAILED),
        (JobState.PENDING, JobState.TIMEOUT),
        (JobState.PENDING, JobState.PENDING),
        (JobState.RUNNING, JobState.RUNNING),
        (JobState.COMPLETED, JobState.RUNNING),
        (JobState.CANCELLED, JobState.PENDING),
    ],
)
def test_forbidden_transitions_raise_conflict(current: JobState, target: JobState) -> None:
    with pytest.raises(Conflict):
        check_transition(1, current, target)


def test_conflict_message_names_the_job_and_both_states() -> None:
    with pytest.raises(Conflict) as info:
        check_transition(42, JobState.COMPLETED, JobState.RUNNING)
    assert info.value.code == "conflict"
    assert "42" in info.value.message
    assert "COMPLETED" in info.value.message
    assert "RUNNING" in info.value.message


def test_job_transition_moves_state_bumps_version_and_applies_changes() -> None:
    job = make_job(version=3)
    running = job.transition(JobState.RUNNING, gpus=(0, 1), started_at=200.0, pid=1234)
    assert running.state is JobState.RUNNING
    assert running.version == 4
    assert running.gpus == (0, 1)
    assert running.started_at == 200.0
    assert running.pid == 1234
    assert running.spec == job.spec and running.id == job.id and running.owner == job.owner
    # Jobs are immutable values: the old one is untouched.
    assert job.state is JobState.PENDING and job.version == 3 and job.gpus == ()


def test_job_transition_refuses_forbidden_change_and_keeps_job() -> None:
    done = make_job(JobState.COMPLETED, version=5)
    with pytest.raises(Conflict):
        done.transition(JobState.RUNNING)
    assert done.state is JobState.COMPLETED and done.version == 5


def test_with_changes_bumps_version_without_moving_state() -> None:
    job = make_job(version=1)
    changed = job.with_changes(reason="Priority")
    assert changed.reason == "Priority"
    assert changed.state is JobState.PENDING
    assert changed.version == 2
