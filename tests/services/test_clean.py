"""`gpuyard clean` on the live decision path (real journal, book and SQLite, simulated time):
finished jobs forgotten with their folders, pending and running ones never, users only their
own, and no id given twice."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gpuyard.domain.errors import Forbidden, NotFound
from gpuyard.domain.principal import Principal
from gpuyard.domain.states import JobState
from gpuyard.scheduling.policies import make_policy
from gpuyard.services.jobs.journal import JobChange
from tests.services.conftest import MakeRig
from tests.services.live_harness import LiveRig


@pytest.fixture
def rig(live_rig: MakeRig) -> LiveRig:
    return live_rig("fifo", gpus=2)


def _gone(rig: LiveRig, job_id: int) -> bool:
    try:
        rig.job(job_id)
    except NotFound:
        return rig.store.get_job(job_id) is None and rig.book.get(job_id) is None
    return False


def test_clean_forgets_finished_jobs_and_their_folders_never_pending_or_running(
    rig: LiveRig,
) -> None:
    done = rig.submit(10, gpus=1)
    failed = rig.submit(20, gpus=1)
    rig.settle()
    rig.advance(30)
    running = rig.submit(1000, gpus=2)
    pending = rig.submit(10, gpus=2)
    rig.settle()
    assert (rig.state(running.id), rig.state(pending.id)) == (JobState.RUNNING, JobState.PENDING)
    cleaned = rig.verbs.clean(rig.actor)
    assert (cleaned.jobs, cleaned.folders_kept) == (2, ())
    assert _gone(rig, done.id) and _gone(rig, failed.id)
    assert sorted(rig.processes.removed) == [done.id, failed.id]
    assert rig.state(running.id) is JobState.RUNNING and rig.state(pending.id) is JobState.PENDING
    assert rig.verbs.clean(rig.actor).jobs == 0
    rig.advance(1030)  # the running job ends, the pending one starts: nothing was lost
    assert rig.state(running.id) is JobState.COMPLETED
    assert rig.state(pending.id) is JobState.RUNNING
    listed = rig.reads.list_jobs(rig.actor, include_finished=True)
    assert [j.id for j in listed] == [running.id, pending.id]


def test_older_than_keeps_what_ended_recently(rig: LiveRig) -> None:
    early = rig.submit(10, gpus=1)
    rig.settle()
    rig.advance(10)
    late = rig.submit(10, gpus=1)
    rig.settle()
    rig.advance(3_600)  # early ended at 10, late at 20
    assert rig.verbs.clean(rig.actor, older_than_s=3_585).jobs == 1
    assert _gone(rig, early.id) and rig.state(late.id) is JobState.COMPLETED


def test_a_user_cleans_only_their_own_and_an_admin_anyones(rig: LiveRig) -> None:
    ada = rig.submit(10, gpus=1, user="ada")
    bob = rig.submit(10, gpus=1, user="bob")
    rig.settle()
    rig.advance(10)
    with pytest.raises(Forbidden, match="only an admin may clean ada's jobs"):
        rig.verbs.clean(Principal("bob"), owner="ada")
    assert rig.verbs.clean(Principal("bob")).jobs == 1
    assert _gone(rig, bob.id) and rig.state(ada.id) is JobState.COMPLETED
    assert rig.verbs.clean(rig.actor, owner="ada").jobs == 1
    assert _gone(rig, ada.id)


def test_the_newest_job_cleaned_keeps_its_id_taken(rig: LiveRig, tmp_path: Path) -> None:
    first = rig.submit(10, gpus=1)
    rig.settle()
    rig.advance(10)
    rig.verbs.clean(rig.actor)
    assert rig.submit(10, gpus=1).id == first.id + 1
    rig.advance(20)
    rig.verbs.clean(rig.actor)
    rig.close()
    again = LiveRig(tmp_path, make_policy("fifo", for_server=True), gpus=2)  # a restart
    try:
        assert again.submit(10, gpus=1).id == first.id + 2
    finally:
        again.close()


def test_clean_tells_the_journals_observers_of_each_job_it_forgot(rig: LiveRig) -> None:
    done = rig.submit(10, gpus=1)
    rig.settle()
    rig.advance(10)
    waiting = rig.submit(10, gpus=2)  # the policy's queue, which a removal must not touch
    events = len(rig.events.recent())

    async def heard() -> JobChange:
        async with rig.feed.subscribe() as sub:
            assert rig.verbs.clean(rig.actor).jobs == 1
            return await asyncio.wait_for(sub.get(), 5)

    change = asyncio.run(heard())
    assert change.removed and change.after.id == done.id and change.before == change.after
    assert len(rig.events.recent()) == events  # no event: a removal is no state change
    rig.settle()
    assert rig.state(waiting.id) is JobState.RUNNING
