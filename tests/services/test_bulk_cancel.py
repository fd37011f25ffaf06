"""Cancelling many jobs at once (`scancel -u USER -t PENDING`, the dashboard's selection): one
call, the pending jobs in one durable write per 1,000, each refusal said on its own."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from gpuyard.domain.errors import Conflict, NotFound
from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.principal import Principal
from gpuyard.domain.states import JobState
from tests.services.conftest import MakeRig
from tests.services.live_harness import LiveRig


def _count_cancel_writes(rig: LiveRig) -> list[int]:
    """How many jobs each store write that cancels jobs carried, in order."""
    carried: list[int] = []
    real = rig.store.write

    def write(inserts: Sequence[Job], updates: Sequence[Job]) -> None:
        cancels = sum(job.state is JobState.CANCELLED for job in updates)
        if cancels:
            carried.append(cancels)
        real(inserts, updates)

    rig.store.write = write  # type: ignore[method-assign]
    return carried


def test_two_thousand_pending_jobs_are_cancelled_in_two_writes_and_the_rest_refused_each(
    live_rig: MakeRig,
) -> None:
    rig = live_rig("fifo", gpus=1)
    running = rig.submit(1_000, gpus=1)
    done = rig.submit(1, gpus=0)
    rig.settle()
    rig.advance(2)
    pending = [rig.submit(100, gpus=1) for _ in range(2_000)]
    theirs = rig.submit(100, gpus=1, user="bob")
    rig.settle()
    assert rig.state(running.id) is JobState.RUNNING and rig.state(done.id).is_terminal
    writes = _count_cancel_writes(rig)

    ids = [running.id, done.id, theirs.id, 999_999, *(job.id for job in pending)]
    result = rig.verbs.cancel_many(ids, Principal("ada"))

    # Not a write per job: a write per 1,000 jobs named (the running one among them).
    assert sum(writes) == 2_000 and len(writes) == 3
    assert sorted(result.cancelled) == sorted(job.id for job in pending)
    assert result.stopping == (running.id,)
    assert rig.job(running.id).stop_intent is JobState.CANCELLED
    assert {i: type(e) for i, e in result.refused.items()} == {
        done.id: Conflict, theirs.id: NotFound, 999_999: NotFound
    }
    assert "already ended" in result.refused[done.id].message
    assert all(rig.state(job.id) is JobState.CANCELLED for job in pending)
    assert rig.state(theirs.id) is JobState.PENDING  # another user's: not touched


def test_an_arrays_id_cancels_all_its_tasks_when_asked_and_only_itself_otherwise(
    live_rig: MakeRig,
) -> None:
    rig = live_rig("fifo", gpus=1)
    blocker = rig.submit(1_000, gpus=1)
    rig.settle()
    spec = JobSpec(argv=("train",), name="t", workdir="/", gpus=1)
    tasks = rig.submits.submit_array([spec] * 3, range(3), Principal("ada"))
    head = tasks[0].id
    rig.verbs.cancel_many([head], Principal("ada"))
    assert [rig.state(t.id) for t in tasks] == [JobState.CANCELLED] + [JobState.PENDING] * 2
    result = rig.verbs.cancel_many([head], Principal("ada"), whole_arrays=True)
    assert [rig.state(t.id) for t in tasks] == [JobState.CANCELLED] * 3
    assert not result.refused  # the array's first task had ended: the array is still named
    rig.verbs.cancel(blocker.id, rig.actor)


def test_an_admins_bulk_cancel_of_other_users_jobs_is_on_the_record(
    live_rig: MakeRig, caplog: pytest.LogCaptureFixture
) -> None:
    rig = live_rig("fifo", gpus=1)
    bobs = [rig.submit(100, gpus=1, user="bob") for _ in range(3)]
    with caplog.at_level("WARNING", logger="gpuyard.audit"):
        rig.verbs.cancel_many([job.id for job in bobs], rig.actor)
    audited = [r.getMessage() for r in caplog.records if r.name == "gpuyard.audit"]
    assert audited == ["admin ada cancelled 3 jobs of bob"]
