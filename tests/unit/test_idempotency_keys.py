"""The client's Idempotency-Keys are uuid4s (made without `uuid`, which the CLI's start path
cannot afford), each new; the book finds a job by its owner and key until it forgets it."""

from __future__ import annotations

import uuid
from dataclasses import replace

from tests.contract.stores import pending_job

from gpuyard.client import new_idempotency_key
from gpuyard.domain.states import JobState
from gpuyard.services.jobs.book import JobBook


def test_keys_are_fresh_uuid4s() -> None:
    keys = {new_idempotency_key() for _ in range(1000)}
    assert len(keys) == 1000
    for key in list(keys)[:50]:
        parsed = uuid.UUID(key)
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122 and str(parsed) == key


def test_the_book_finds_a_job_by_owner_and_key_until_it_is_evicted_or_forgotten() -> None:
    jobs = [replace(pending_job(i), idempotency_key=f"k{i}") for i in (1, 2, 3)]
    book = JobBook(jobs[:1], next_id=2, keep_finished=1)
    book.put(jobs[1])
    assert book.by_idempotency_key("ada", "k1") == jobs[0]
    assert book.by_idempotency_key("bob", "k1") is None  # another owner's key
    assert book.by_idempotency_key("ada", "k2") == jobs[1]

    def ended(i: int) -> None:
        job = book.get(i)
        assert job is not None
        book.put(job.transition(JobState.CANCELLED, ended_at=float(i)))

    ended(1)
    assert book.by_idempotency_key("ada", "k1") is not None  # kept while the book keeps it
    ended(2)  # keep_finished=1: job 1 is evicted
    assert book.by_idempotency_key("ada", "k1") is None
    book.forget([2])  # `gpuyard clean`
    assert book.by_idempotency_key("ada", "k2") is None
    book.put(jobs[2])
    assert book.by_idempotency_key("ada", "k3") == jobs[2]
