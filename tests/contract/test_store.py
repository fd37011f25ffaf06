"""The JobStore port, run against every store (`stores.STORE_BACKENDS`): nothing acknowledged
is lost, updates are compare-and-set, a write is all or nothing."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest

from gpuyard.domain.errors import Conflict
from gpuyard.domain.job import Drain
from gpuyard.domain.states import JobState
from gpuyard.services.ports import JobStore
from tests.contract.stores import (
    Backend,
    ended_job,
    finished_job_with_every_field_set,
    pending_job,
)


def test_a_new_database_is_empty(store: JobStore) -> None:
    assert store.load_jobs() == []
    assert store.load_active(10) == []
    assert store.page_jobs(limit=10) == []
    assert store.max_job_id() == 0
    assert store.get_job(1) is None
    assert store.load_drains() == {}
    assert store.load_gpu_stats(limit=10) == {}


def test_insert_and_load_round_trip_every_field(store: JobStore) -> None:
    full = finished_job_with_every_field_set()
    bare = pending_job(2)
    store.write([full, bare], [])
    assert store.load_jobs() == [bare, full]  # ordered by id
    assert store.get_job(41) == full


def test_long_reasons_and_large_gpu_and_node_lists_round_trip(store: JobStore) -> None:
    # VARCHAR(255) would cut these on PostgreSQL: an OOM reason with its log line, a 128-GPU
    # job's GPU list, a 32-node job's machine list.
    reason = "OutOfMemory: " + "CUDA out of memory. Tried to allocate 2.00 GiB; " * 42
    assert len(reason) > 2000
    nodes = ",".join(f"gpu-node-{i:03d}.cluster.example.org" for i in range(32))
    job = pending_job(1, gpus=128, nodes=32).transition(
        JobState.RUNNING, gpus=tuple(range(128)), node=nodes, started_at=1001.0
    )
    ended = job.transition(JobState.OUT_OF_MEMORY, reason=reason, ended_at=1002.0)
    store.write([pending_job(1, gpus=128, nodes=32)], [])
    store.write([], [job])
    store.write([], [ended])
    assert store.get_job(1) == ended
    assert store.load_jobs() == [ended]


def test_update_is_compare_and_set_on_version(store: JobStore) -> None:
    job = pending_job(1, gpus=2)
    store.write([job], [])
    running = job.transition(JobState.RUNNING, gpus=(0, 1), started_at=1001.0, pid=77)
    store.write([], [running])
    assert store.load_jobs() == [running]
    done = running.transition(JobState.COMPLETED, exit_code=0, ended_at=1002.0)
    store.write([], [done])
    assert store.load_jobs() == [done]
    assert store.load_jobs()[0].version == 3


def test_stale_update_raises_conflict_and_changes_nothing(store: JobStore) -> None:
    job = pending_job(1)
    store.write([job], [])
    winner = job.transition(JobState.CANCELLED, reason="Cancelled by user")
    store.write([], [winner])
    loser = job.transition(JobState.RUNNING, gpus=(0,))  # computed from version 1 too
    with pytest.raises(Conflict):
        store.write([], [loser])
    assert store.load_jobs() == [winner]


def test_update_of_a_missing_job_raises_conflict(store: JobStore) -> None:
    with pytest.raises(Conflict):
        store.write([], [pending_job(5).with_changes(reason="x")])
    assert store.load_jobs() == []


def test_one_write_is_all_or_nothing(store: JobStore) -> None:
    old = pending_job(1)
    store.write([old], [])
    good = old.with_changes(reason="Priority")
    store.write([], [good])
    # A requeue of job 2 that rides with a stale update of job 1: neither may land.
    with pytest.raises(Conflict):
        store.write([pending_job(2)], [old.with_changes(reason="stale")])
    assert store.load_jobs() == [good]


def test_a_write_may_insert_a_job_and_update_it(store: JobStore) -> None:
    job = pending_job(1)
    later = job.with_changes(reason="Resources")
    store.write([job], [later, later.with_changes(reason="Priority")])
    (stored,) = store.load_jobs()
    assert (stored.version, stored.reason) == (3, "Priority")


def test_duplicate_id_is_refused(store: JobStore) -> None:
    store.write([pending_job(1)], [])
    with pytest.raises(Exception):  # noqa: B017 - SQL: IntegrityError; memory: Conflict
        store.write([pending_job(1, gpus=8)], [])
    assert store.load_jobs() == [pending_job(1)]


def test_write_future_completes_once_written_and_carries_a_conflict(store: JobStore) -> None:
    job = pending_job(1)
    done: Future[None] = store.write_future([job], [])
    assert done.result(timeout=10) is None
    assert store.get_job(1) == job
    stale = store.write_future([], [job.with_changes().with_changes()])  # skips a version
    with pytest.raises(Conflict):
        stale.result(timeout=10)
    assert store.get_job(1) == job


def test_concurrent_writers_all_land(store: JobStore) -> None:
    next_id = iter(range(1, 10_000))
    id_lock = threading.Lock()
    errors: list[BaseException] = []
    per_thread = 25

    def writer() -> None:
        try:
            for _ in range(per_thread):
                with id_lock:
                    job_id = next(next_id)
                job = pending_job(job_id)
                store.write([job], [])
                store.write([], [job.with_changes(reason="Resources")])
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=writer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    jobs = store.load_jobs()
    assert [j.id for j in jobs] == list(range(1, 8 * per_thread + 1))
    assert all(j.version == 2 and j.reason == "Resources" for j in jobs)


def test_reopening_sees_every_committed_job(backend: Backend) -> None:
    first = backend.open()
    job = pending_job(1)
    first.write([job, pending_job(2)], [])
    first.write([], [job.transition(JobState.RUNNING, gpus=(0,))])
    expected = first.load_jobs()
    first.close()
    for new_id in (3, 4):
        again = backend.open()
        assert again.load_jobs() == expected
        again.write([pending_job(new_id)], [])
        expected = again.load_jobs()
        assert [j.id for j in expected] == list(range(1, new_id + 1))
        again.close()


def test_writes_after_close_are_refused(store: JobStore) -> None:
    store.close()
    with pytest.raises(RuntimeError):
        store.write([pending_job(1)], [])


def test_drains_are_kept_by_gpu_uuid_across_a_reopen(backend: Backend) -> None:
    first = backend.open()
    first.save_drain("GPU-4e0c5b1a-77d3-4a8e-b2c5-6a1b2c3d4e5f", Drain("fan", "admin", 5.0))
    first.save_drain("raynode-b/gpu3", Drain("XID 79", "auto", 6.0))
    first.save_drain("index:2", Drain("old", "admin", 1.0))
    first.save_drain("raynode-b/gpu3", Drain("XID 48", "auto", 7.0))  # replaced, not doubled
    first.save_drain("index:2", None)  # resumed
    first.save_drain("GPU-never-drained", None)  # resuming a GPU in service changes nothing
    first.close()
    again = backend.open()
    assert again.load_drains() == {
        "GPU-4e0c5b1a-77d3-4a8e-b2c5-6a1b2c3d4e5f": Drain("fan", "admin", 5.0),
        "raynode-b/gpu3": Drain("XID 48", "auto", 7.0),
    }


def test_gpu_stats_are_replaced_and_the_last_ones_loaded(backend: Backend) -> None:
    first = backend.open()
    stats = {"samples": 12, "util_peak_pct": 99, "gpu_s": 24.0, "peaks_mib": [1, 2]}
    for job_id in (9, 7, 8):
        first.save_gpu_stats(job_id, {**stats, "samples": job_id})
    first.save_gpu_stats(7, {**stats, "samples": 13})  # saved again: replaced, not doubled
    first.close()
    again = backend.open()
    assert again.load_gpu_stats(limit=10) == {
        7: {**stats, "samples": 13}, 8: {**stats, "samples": 8}, 9: {**stats, "samples": 9}
    }  # fmt: skip
    assert list(again.load_gpu_stats(limit=2)) == [8, 9]  # the last jobs, by id


def test_delete_finished_deletes_only_finished_jobs_and_keeps_their_ids_taken(
    backend: Backend,
) -> None:
    store = backend.open()
    running = pending_job(5).transition(JobState.RUNNING, gpus=(0,), started_at=1001.0)
    jobs = [
        ended_job(1, ended_at=100.0),
        ended_job(2, ended_at=200.0, state=JobState.FAILED, owner="bob"),
        ended_job(3, ended_at=300.0, state=JobState.CANCELLED),
        pending_job(4),
        running,
        ended_job(6, ended_at=600.0, state=JobState.TIMEOUT),
    ]
    store.write(jobs, [])
    store.save_gpu_stats(1, {"gpu_seconds": 1.0})
    store.save_gpu_stats(6, {"gpu_seconds": 6.0})
    assert store.delete_finished(ended_before=250.0, owner="ada") == [1]
    assert store.delete_finished(ended_before=250.0) == [2]
    assert store.delete_finished(owner="nobody") == []
    assert store.delete_finished() == [3, 6]  # everything finished: never 4 or 5
    assert [j.id for j in store.load_jobs()] == [4, 5]
    assert store.get_job(6) is None and store.load_gpu_stats(limit=10) == {}
    assert store.max_job_id() == 6  # the newest job was deleted: its id stays taken
    assert [j.id for j in store.load_active(10)] == [4, 5]
    reopened = backend.open()
    assert reopened.max_job_id() == 6
    assert [j.id for j in reopened.page_jobs(limit=10)] == [5, 4]
