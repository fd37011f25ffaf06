"""The everyday verbs on the live decision path (real journal, scheduler and SQLite, simulated
time): drain (Slurm's DRAIN and --now), hold/release, requeue, update and restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuyard.domain.errors import Conflict, InvalidRequest, NotFound
from gpuyard.domain.job import REASON_HELD
from gpuyard.domain.principal import Principal
from gpuyard.domain.states import JobState
from gpuyard.scheduling.policies import make_policy
from tests.services.conftest import MakeRig
from tests.services.live_harness import LiveRig


@pytest.fixture
def rig(live_rig: MakeRig) -> LiveRig:
    return live_rig("fifo", gpus=2)


# -- drain ------------------------------------------------------------------------------------


def test_an_admin_drain_lets_the_running_job_finish_and_places_nothing_new_there(
    rig: LiveRig,
) -> None:
    running = rig.submit(100, gpus=1)
    rig.settle()
    gpu = rig.job(running.id).gpus[0]
    left = rig.gpus.drain(gpu, "maintenance", rig.actor)
    assert [j.id for j in left] == [running.id]
    rig.settle()
    assert rig.job(running.id).stop_intent is None
    assert rig.state(running.id) is JobState.RUNNING
    later = rig.submit(100, gpus=1)
    rig.settle()
    assert rig.job(later.id).gpus == (1 - gpu,)  # not on the drained GPU
    rig.advance(100)
    assert rig.state(running.id) is JobState.COMPLETED


def test_an_admin_drain_now_requeues_the_running_job_instead_of_failing_it(
    rig: LiveRig,
) -> None:
    running = rig.submit(100, gpus=2)
    rig.settle()
    stopped = rig.gpus.drain(0, "maintenance", rig.actor, now=True)
    assert [j.id for j in stopped] == [running.id]
    rig.settle()
    job = rig.job(running.id)
    assert (job.state, job.restarts) == (JobState.PENDING, 1)  # 2 GPUs, one drained: waits
    rig.gpus.resume(0, rig.actor)
    rig.settle()
    assert rig.state(running.id) is JobState.RUNNING


# -- hold and release -------------------------------------------------------------------------


def test_a_held_job_never_starts_stays_held_across_a_restart_and_starts_once_released(
    tmp_path: Path,
) -> None:
    rig = LiveRig(tmp_path, make_policy("fifo", for_server=True), gpus=1)
    try:
        blocker = rig.submit(100, gpus=1)
        rig.settle()
        waiting = rig.submit(10, gpus=1, user="bob")
        held = rig.verbs.hold(waiting.id, Principal("bob"))
        assert held.held and rig.reads.reason(held) == REASON_HELD
        rig.advance(100)  # the GPU is free: still not started
        assert rig.state(blocker.id) is JobState.COMPLETED
        assert rig.state(waiting.id) is JobState.PENDING
    finally:
        rig.close()
    again = LiveRig(tmp_path, make_policy("fifo", for_server=True), gpus=1)
    try:
        again.processes.work_s[waiting.id] = 10
        again.settle()
        job = again.job(waiting.id)
        assert (job.state, job.held, again.reads.reason(job)) == (
            JobState.PENDING, True, REASON_HELD,
        )  # fmt: skip
        released = again.verbs.release(waiting.id, Principal("bob"))
        assert not released.held
        again.settle()
        assert again.state(waiting.id) is JobState.RUNNING
    finally:
        again.close()


def test_hold_and_release_refuse_what_they_cannot_do_in_one_line(rig: LiveRig) -> None:
    running = rig.submit(100, gpus=1, user="bob")
    rig.settle()
    with pytest.raises(Conflict, match=r"^job 1 is RUNNING; only a pending job can be held"):
        rig.verbs.hold(running.id, Principal("bob"))
    with pytest.raises(Conflict, match="is not held"):
        rig.verbs.release(running.id, Principal("bob"))
    with pytest.raises(NotFound):
        rig.verbs.hold(running.id, Principal("eve"))  # another user's job is not there


# -- requeue ----------------------------------------------------------------------------------


def test_requeue_stops_a_running_job_and_puts_it_back_in_the_queue(rig: LiveRig) -> None:
    job = rig.submit(100, gpus=2)
    rig.settle()
    rig.advance(30)
    stopping = rig.verbs.requeue(job.id, rig.actor)
    assert (stopping.state, stopping.stop_intent) == (JobState.RUNNING, JobState.PENDING)
    rig.settle()
    again = rig.job(job.id)
    assert again.restarts == 1 and again.attained_gpu_s == pytest.approx(60)
    assert again.state is JobState.RUNNING  # it was alone: it starts again at once
    with pytest.raises(Conflict, match="is pending: it is in the queue already"):
        rig.verbs.requeue(rig.submit(1, gpus=1).id, rig.actor)


# -- update -----------------------------------------------------------------------------------


def test_update_of_a_pending_job_reaches_the_scheduler_and_keeps_its_submit_time(
    rig: LiveRig,
) -> None:
    first = rig.submit(100, gpus=1)
    too_big = rig.submit(100, gpus=2, time_limit_s=3600)
    behind = rig.submit(100, gpus=1)
    rig.settle()
    assert rig.state(too_big.id) is rig.state(behind.id) is JobState.PENDING  # fifo: 2 GPUs
    updated = rig.verbs.update(too_big.id, rig.actor, gpus=1, time_limit_s=600, priority=3)
    assert (updated.spec.gpus, updated.spec.time_limit_s, updated.spec.priority) == (1, 600, 3)
    assert updated.submitted_at == too_big.submitted_at
    rig.settle()  # it fits on the free GPU now, and is still ahead of the job behind it
    assert rig.state(too_big.id) is JobState.RUNNING
    assert rig.state(behind.id) is JobState.PENDING
    with pytest.raises(Conflict, match=r"^job \d+ is RUNNING; only a pending job can be upd"):
        rig.verbs.update(too_big.id, rig.actor, priority=1)
    with pytest.raises(InvalidRequest, match="nothing to update"):
        rig.verbs.update(first.id, rig.actor)
    with pytest.raises(InvalidRequest, match="this server has 2 GPUs"):
        rig.verbs.update(rig.submit(1, gpus=2).id, rig.actor, gpus=3)


# -- restart ----------------------------------------------------------------------------------


def test_restart_runs_a_finished_job_again_under_a_new_id_linked_to_the_old(rig: LiveRig) -> None:
    job = rig.submit(10, gpus=1, user="bob", time_limit_s=60)
    rig.settle()
    with pytest.raises(Conflict, match="only a finished job can be restarted"):
        rig.verbs.restart(job.id, Principal("bob"))
    rig.advance(10)
    again = rig.verbs.restart(job.id, Principal("bob"))
    assert again.id != job.id and again.restart_of == job.id
    assert (again.spec, again.owner) == (job.spec, "bob")
    stored = rig.store.get_job(again.id)
    assert stored is not None and stored.restart_of == job.id


def test_a_finished_jobs_script_copy_stays_in_the_store_and_restart_uses_it(rig: LiveRig) -> None:
    copy = "#!/bin/sh\necho the copy taken at submit\n"
    job = rig.submit(10, gpus=1, user="bob", argv=("sh", "job.sh"), script=copy, script_index=1)
    rig.settle()
    assert rig.job(job.id).spec.script == copy  # running: the launch needs it
    rig.advance(10)
    assert rig.state(job.id) is JobState.COMPLETED
    assert rig.job(job.id).spec.script is None  # finished: not held in memory
    assert rig.store.get_job(job.id).spec.script == copy  # type: ignore[union-attr]
    again = rig.verbs.restart(job.id, Principal("bob"))
    assert again.spec.script == copy and again.spec.argv == ("sh", "job.sh")
