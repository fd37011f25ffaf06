"""`find_by_idempotency_key`: the job an owner's key made, over every backend, after a reopen
and after the job ended; another owner's key never matches."""

from __future__ import annotations

import dataclasses

from gpuyard.domain.states import JobState
from gpuyard.services.ports import JobStore
from tests.contract.stores import Backend, ended_job, pending_job


def test_a_key_finds_its_owners_job_and_no_one_elses(store: JobStore) -> None:
    mine = dataclasses.replace(pending_job(1), idempotency_key="k-1")
    theirs = dataclasses.replace(pending_job(2), owner="bob", idempotency_key="k-1")
    plain = pending_job(3)
    store.write([mine, theirs, plain], [])

    assert store.find_by_idempotency_key("ada", "k-1") == mine
    assert store.find_by_idempotency_key("bob", "k-1") == theirs
    assert store.find_by_idempotency_key("carol", "k-1") is None
    assert store.find_by_idempotency_key("ada", "k-2") is None
    assert store.find_by_idempotency_key("ada", "K-1") is None  # keys are exact


def test_the_key_outlives_the_job_ending_and_a_reopen(backend: Backend) -> None:
    store = backend.open()
    job = dataclasses.replace(pending_job(7), idempotency_key="retry-me")
    store.write([job], [])
    running = job.transition(JobState.RUNNING, gpus=(0,), started_at=1001.0)
    done = running.transition(JobState.COMPLETED, ended_at=1002.0, exit_code=0)
    store.write([], [running])
    store.write([], [done])
    store.close()

    reopened = backend.open()
    found = reopened.find_by_idempotency_key("ada", "retry-me")
    assert found is not None and found.id == 7 and found.state is JobState.COMPLETED


def test_of_several_rows_with_one_key_the_first_is_answered(store: JobStore) -> None:
    """The service never writes two (the index is not UNIQUE, so one bad row can never fail a
    group commit); if a database holds two anyway, the answer is stable: the lowest id."""
    first = dataclasses.replace(ended_job(4, ended_at=5.0), idempotency_key="dup")
    second = dataclasses.replace(pending_job(9), idempotency_key="dup")
    store.write([second, first], [])
    found = store.find_by_idempotency_key("ada", "dup")
    assert found is not None and found.id == 4
