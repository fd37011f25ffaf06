"""The ProgressStore port on every store: a job's timeline written in batches, replaced whole
after a compaction, kept across a reopen, dropped with the job by `clean`."""

from __future__ import annotations

import dataclasses
from typing import cast

from gpuyard.domain.progress_series import ProgressPoint
from gpuyard.domain.states import JobState
from gpuyard.services.stores import ProgressStore
from tests.contract.stores import Backend, pending_job


def _progress(backend: Backend) -> tuple[ProgressStore, object]:
    store = backend.open()
    return cast(ProgressStore, store), store


def test_points_are_written_in_a_batch_and_read_back_in_order(backend: Backend) -> None:
    progress, _ = _progress(backend)
    progress.save_progress(
        [
            (7, ProgressPoint(1000.5, 20, 100, {"loss": 0.5})),
            (7, ProgressPoint(1000.0, 10, 100, {"loss": 0.9, "acc": 0.1})),
            (8, ProgressPoint(1000.0, 1, None, {})),
        ]
    )
    assert progress.load_progress(7) == [
        ProgressPoint(1000.0, 10, 100, {"loss": 0.9, "acc": 0.1}),
        ProgressPoint(1000.5, 20, 100, {"loss": 0.5}),
    ]
    assert progress.load_progress(8) == [ProgressPoint(1000.0, 1, None, {})]
    assert progress.load_progress(9) == []


def test_a_point_of_the_same_time_is_replaced_not_added(backend: Backend) -> None:
    progress, _ = _progress(backend)
    progress.save_progress([(7, ProgressPoint(5.0, 1, 10, {"loss": 2.0}))])
    progress.save_progress([(7, ProgressPoint(5.0, 3, 10, {"loss": 1.0}))])
    assert progress.load_progress(7) == [ProgressPoint(5.0, 3, 10, {"loss": 1.0})]


def test_replace_deletes_the_jobs_stored_points_first(backend: Backend) -> None:
    progress, _ = _progress(backend)
    progress.save_progress([(7, ProgressPoint(float(t), t, None, {})) for t in range(10)])
    progress.save_progress([(8, ProgressPoint(1.0, 1, None, {}))])
    progress.save_progress([(7, ProgressPoint(0.0, 9, None, {"loss": 0.1}))], replace=[7])
    assert progress.load_progress(7) == [ProgressPoint(0.0, 9, None, {"loss": 0.1})]
    assert progress.load_progress(8) == [ProgressPoint(1.0, 1, None, {})]  # others untouched


def test_points_survive_a_reopen_and_go_with_a_cleaned_job(backend: Backend) -> None:
    progress, store = _progress(backend)
    job = dataclasses.replace(pending_job(3), state=JobState.COMPLETED, ended_at=50.0)
    store.write([job], [])  # type: ignore[attr-defined]
    progress.save_progress([(3, ProgressPoint(float(t), t, 2000, {})) for t in range(2000)])
    store.close()  # type: ignore[attr-defined]
    again = backend.open()
    assert len(cast(ProgressStore, again).load_progress(3)) == 2000
    assert again.delete_finished() == [3]
    assert cast(ProgressStore, again).load_progress(3) == []
