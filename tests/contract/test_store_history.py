"""History and ownership through the JobStore port, for every store: what a restarted server
loads (`load_active`), pages of history (`page_jobs`), and the one-server lock."""

from __future__ import annotations

import pytest

from gpuyard.domain.errors import Unavailable
from gpuyard.domain.job import Job
from gpuyard.domain.states import JobState
from gpuyard.services.jobs.book import JobBook
from gpuyard.services.ports import JobStore
from tests.contract.stores import Backend, ended_job, pending_job

FAILED, DONE = JobState.FAILED, JobState.COMPLETED


def history(store: JobStore) -> list[Job]:
    """Jobs 1-40 ended (every third FAILED, owners alternate, names cycle through three),
    ending in an order unrelated to their ids; job 41 running, 42 and 43 pending."""
    ended = [
        ended_job(i, ended_at=float((i * 7) % 40), state=FAILED if i % 3 == 0 else DONE,
                  owner="ada" if i % 2 else "grace", name=f"exp{i % 3}", submitted_at=100.0 + i)
        for i in range(1, 41)
    ]  # fmt: skip
    running = pending_job(41).transition(JobState.RUNNING, gpus=(1,), started_at=5.0)
    store.write([*ended, pending_job(41), pending_job(42), pending_job(43)], [])
    store.write([], [running])
    return store.load_jobs()


def test_load_active_is_the_unfinished_jobs_and_the_last_to_end(store: JobStore) -> None:
    everything = history(store)
    got = store.load_active(5)
    assert [j.id for j in got] == sorted(j.id for j in got)
    unfinished = {j.id for j in everything if not j.state.is_terminal}
    ends = sorted((j for j in everything if j.state.is_terminal), key=lambda j: j.ended_at or 0)
    assert {j.id for j in got} == unfinished | {j.id for j in ends[-5:]}
    assert {j.id for j in store.load_active(0)} == unfinished == {41, 42, 43}
    assert len(store.load_active(1000)) == len(everything)
    assert got == [j for j in everything if j.id in {g.id for g in got}]  # whole jobs


def test_max_job_id_and_get_job_reach_every_job(store: JobStore) -> None:
    everything = history(store)
    assert store.max_job_id() == 43
    assert store.get_job(3) == everything[2]
    assert store.get_job(44) is None


def test_pages_walk_the_whole_history_newest_first(store: JobStore) -> None:
    everything = history(store)
    seen: list[int] = []
    before: int | None = None
    while page := store.page_jobs(limit=7, before_id=before):
        assert len(page) <= 7
        seen += [j.id for j in page]
        before = page[-1].id
    assert seen == [j.id for j in reversed(everything)]
    assert store.page_jobs(limit=3) == list(reversed(everything))[:3]
    assert store.page_jobs(limit=0) == []


def test_pages_filter_by_state_owner_name_and_time(store: JobStore) -> None:
    everything = history(store)

    def ids(**filters: object) -> list[int]:
        return [j.id for j in store.page_jobs(limit=100, **filters)]  # type: ignore[arg-type]

    def expect(keep: object) -> list[int]:
        return [j.id for j in reversed(everything) if keep(j)]  # type: ignore[operator]

    assert ids(states=[FAILED]) == expect(lambda j: j.state is FAILED)
    assert ids(states={JobState.PENDING, JobState.RUNNING}) == [43, 42, 41]
    assert ids(states=[]) == []
    assert ids(owner="grace") == expect(lambda j: j.owner == "grace")
    assert ids(name="exp1") == expect(lambda j: j.spec.name == "exp1")
    assert ids(since=130.0) == expect(lambda j: j.submitted_at >= 130.0)
    both = ids(owner="ada", states=[DONE], name="exp1", before_id=30)
    assert both == expect(
        lambda j: j.owner == "ada" and j.state is DONE and j.spec.name == "exp1" and j.id < 30
    )
    assert both  # the filters leave something to compare
    assert ids(owner="nobody") == []


def test_a_restarted_server_keeps_a_bounded_book_and_new_ids_above_all(store: JobStore) -> None:
    history(store)
    book = JobBook(store.load_active(10), next_id=store.max_job_id() + 1, keep_finished=10)
    assert book.allocate_id() == 44  # never an id of a job left in the store only
    kept = book.jobs(include_finished=True)
    assert len(kept) == 13 and len(book.jobs(include_finished=False)) == 3
    evicted = next(i for i in range(1, 41) if book.get(i) is None)
    assert store.get_job(evicted) is not None  # the service falls back to the store


def test_a_second_server_on_the_same_database_is_refused(backend: Backend) -> None:
    first = backend.open()
    first.lock_exclusive()
    first.lock_exclusive()  # taking it again is harmless
    second = backend.open()
    with pytest.raises(Unavailable) as refused:
        second.lock_exclusive()
    assert "another gpuyard server already uses" in refused.value.message
    # What to pass instead: the database is the state dir's, or PostgreSQL's --db.
    assert ("--db" if backend.name == "postgresql" else "--state-dir") in refused.value.message
    first.close()  # releases the lock
    second.lock_exclusive()
    third = backend.open()
    with pytest.raises(Unavailable):
        third.lock_exclusive()
