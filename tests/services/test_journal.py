"""The journal: every change durable, then in the book, then published; a failed write is
retried until it lands, whatever kind of change it was (injected write failures)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gpuyard.domain.errors import Conflict, Forbidden, NotFound
from gpuyard.domain.job import Drain, Job
from gpuyard.domain.principal import Principal
from gpuyard.domain.states import JobState
from gpuyard.scheduling.policies import make_policy
from gpuyard.services.ports import ExitStatus
from tests.services.conftest import MakeRig
from tests.services.live_harness import LiveRig


class FailingWrites:
    """Makes the rig's store refuse the writes `matches` picks, `times` times (disk full)."""

    def __init__(self, rig: LiveRig, matches: Callable[[Job], bool], times: int = 1) -> None:
        self.left = times
        self.refused: list[Job] = []
        real = rig.store.write

        def write(inserts: Sequence[Job], updates: Sequence[Job]) -> None:
            if self.left > 0 and any(matches(job) for job in updates):
                self.left -= 1
                self.refused.extend(updates)
                raise OSError(28, "No space left on device")
            real(inserts, updates)

        rig.store.write = write  # type: ignore[method-assign]


@pytest.fixture
def rig(live_rig: MakeRig) -> LiveRig:
    return live_rig("fifo", gpus=1)


def test_an_end_record_that_fails_is_retried_and_then_frees_the_gpu(rig: LiveRig) -> None:
    first = rig.submit(10, gpus=1)
    second = rig.submit(10, gpus=1)
    rig.settle()
    failing = FailingWrites(rig, lambda job: job.state is JobState.COMPLETED, times=2)
    rig.advance(10)  # the first job exits; its end record fails twice
    assert failing.refused and rig.journal.unwritten_count() == 0
    assert rig.state(first.id) is JobState.COMPLETED
    assert rig.state(second.id) is JobState.RUNNING  # its GPU went on once the end landed


def test_while_an_end_waits_for_the_disk_the_job_keeps_its_gpus(rig: LiveRig) -> None:
    first = rig.submit(10, gpus=1)
    second = rig.submit(10, gpus=1)
    rig.settle()
    FailingWrites(rig, lambda job: job.state is JobState.COMPLETED, times=10**6)
    rig.advance(10)
    assert rig.journal.unwritten_count() == 1
    # The book still says RUNNING (nothing unwritten is published) and no GPU is given twice.
    assert rig.state(first.id) is JobState.RUNNING
    assert rig.state(second.id) is JobState.PENDING
    assert rig.journal.current(first.id).state is JobState.COMPLETED  # type: ignore[union-attr]


def test_a_pid_record_that_fails_is_still_watched_and_lands_later(rig: LiveRig) -> None:
    watched: list[int] = []
    rig.processes.watch = lambda job: watched.append(job.id)  # type: ignore[method-assign]
    failing = FailingWrites(rig, lambda job: job.pid is not None)
    job = rig.submit(10, gpus=1)
    rig.settle()
    assert failing.refused and watched == [job.id]
    assert rig.job(job.id).pid is not None  # retried on the next tick
    rig.advance(10)
    assert rig.state(job.id) is JobState.COMPLETED


def test_a_cancel_whose_record_fails_is_not_lost(rig: LiveRig) -> None:
    rig.submit(100, gpus=1)
    waiting = rig.submit(100, gpus=1)
    rig.settle()
    FailingWrites(rig, lambda job: job.state is JobState.CANCELLED)
    rig.verbs.cancel(waiting.id, rig.actor)
    assert rig.journal.current(waiting.id).state is JobState.CANCELLED  # type: ignore[union-attr]
    rig.settle()
    assert rig.state(waiting.id) is JobState.CANCELLED
    rig.advance(100)  # the first job ends: the cancelled one never starts
    assert rig.state(waiting.id) is JobState.CANCELLED and waiting.id not in rig.processes.runs


def test_a_change_made_on_an_unwritten_one_replaces_it(rig: LiveRig) -> None:
    job = rig.submit(100, gpus=1)
    rig.settle()
    failing = FailingWrites(rig, lambda j: j.stop_intent is not None, times=1)
    rig.verbs.cancel(job.id, rig.actor)  # the stop intent cannot be written yet
    assert failing.refused and rig.journal.unwritten_count() == 1
    rig.controller.on_exit(job.id, ExitStatus(exit_code=None, signal=15, ended_at=rig.now))
    rig.settle()
    ended = rig.job(job.id)
    assert ended.state is JobState.CANCELLED and rig.journal.unwritten_count() == 0
    assert rig.store.get_job(job.id) == ended  # the book and the store agree


def test_a_subscriber_hears_every_change_in_commit_order(rig: LiveRig) -> None:
    async def collect() -> list[tuple[str | None, str]]:
        seen: list[tuple[str | None, str]] = []
        async with rig.feed.subscribe() as sub:
            job = rig.submit(5, gpus=1)
            rig.settle()  # started, then its pid recorded
            rig.advance(rig.now + 5)  # ended
            while len(seen) < 4:
                change = await asyncio.wait_for(sub.get(), 5)
                assert change.after.id == job.id
                before = change.before.state.value if change.before else None
                seen.append((before, change.after.state.value))
        return seen

    assert asyncio.run(collect()) == [
        (None, "PENDING"),
        ("PENDING", "RUNNING"),
        ("RUNNING", "RUNNING"),
        ("RUNNING", "COMPLETED"),
    ]
    assert rig.feed.subscribers == 0  # gone with the subscriber's block


def test_the_events_ring_hears_job_changes_and_drains_as_they_commit(rig: LiveRig) -> None:
    job = rig.submit(100, gpus=1, user="ada")
    rig.settle()
    rig.drains.drain(0, "fan check", "admin")  # what runs there finishes: no job event
    rig.journal.change(job.id, lambda j: j.with_changes(state=JobState.OUT_OF_MEMORY), 5.0)
    rig.drains.resume(0)
    assert [(e.kind, e.gpu, e.job_id) for e in rig.events.recent()] == [
        ("drain", 0, None), ("oom_kill", None, job.id), ("resume", 0, None),
    ]  # fmt: skip


def test_a_failing_drain_listener_breaks_no_drain(rig: LiveRig) -> None:
    from gpuyard.services.jobs.drains import DrainService

    def broken(gpu_index: int, drain: Drain | None) -> None:
        raise RuntimeError("a listener's bug")

    drains = DrainService(
        rig.store, rig.journal, rig.scheduler, rig.inventory, binds_devices=True,
        clock=rig.clock, wake=lambda: None, listeners=[broken],
    )  # fmt: skip
    drains.drain(0, "fan check", "admin")
    assert drains.current()[0].reason == "fan check"
    drains.resume(0)
    assert drains.current() == {}


def test_use_cases_decide_who_may_see_and_change_a_job(rig: LiveRig) -> None:
    job = rig.submit(100, gpus=1, user="ada")
    rig.settle()
    bob = Principal("bob")
    with pytest.raises(NotFound):
        rig.reads.get(job.id, bob)  # another user's job is not there for bob
    with pytest.raises(NotFound):
        rig.verbs.cancel(job.id, bob)
    with pytest.raises(NotFound):
        rig.reads.read_log(job.id, bob)
    with pytest.raises(Forbidden, match="only an admin"):
        rig.gpus.drain(0, "maintenance", bob)
    assert rig.verbs.cancel(job.id, Principal("ada")).stop_intent is JobState.CANCELLED
    assert rig.state(job.id) is JobState.RUNNING  # stopping; it ends when its process is gone


def test_a_single_gpu_drain_is_refused_where_the_backend_picks_devices(
    tmp_path: Path,
) -> None:
    from tests.services import live_harness

    original = live_harness.SimulatedProcesses.binds_devices
    live_harness.SimulatedProcesses.binds_devices = False  # as the Ray backend
    try:
        rig = LiveRig(tmp_path, make_policy("fifo", for_server=True), gpus=2)
    finally:
        live_harness.SimulatedProcesses.binds_devices = original
    try:
        with pytest.raises(Conflict, match="chooses each job's physical GPUs"):
            rig.gpus.drain(0, "maintenance", rig.actor)
        assert rig.drains.current() == {}
    finally:
        rig.close()


def test_an_admin_cancelling_another_users_job_is_on_the_record(
    rig: LiveRig, caplog: pytest.LogCaptureFixture
) -> None:
    job = rig.submit(100, gpus=1, user="bob")
    rig.settle()
    with caplog.at_level("WARNING", logger="gpuyard.audit"):
        rig.verbs.cancel(job.id, Principal("bob"))  # the owner: not an audit event
        assert not [r for r in caplog.records if r.name == "gpuyard.audit"]
    again = rig.submit(100, gpus=1, user="bob")
    with caplog.at_level("WARNING", logger="gpuyard.audit"):
        rig.verbs.cancel(again.id, Principal("root", role="admin"))
    audited = [r.getMessage() for r in caplog.records if r.name == "gpuyard.audit"]
    assert audited == [f"admin root cancelled job {again.id} of bob"]


@pytest.mark.parametrize("per_request", [1, 2], ids=["cancel ID", "cancel ID ID"])
def test_cancels_arriving_together_share_one_durable_write(rig: LiveRig, per_request: int) -> None:
    """A cancel used to hold the journal across its own write, so N cancels took N write rounds
    one after another (the convoy behind `bench/mixed_load.py`'s cancel p50 of 1.1 s)."""
    rig.submit(100, gpus=1)  # holds the GPU: the others pend
    waiting = [rig.submit(100, gpus=1) for _ in range(16)]
    requests = [waiting[i : i + per_request] for i in range(0, len(waiting), per_request)]

    def cancel(jobs: list[Job]) -> list[JobState]:
        if per_request == 1:
            return [rig.verbs.cancel(jobs[0].id, rig.actor).state]
        done = rig.verbs.cancel_many([job.id for job in jobs], rig.actor)
        return [rig.job(i).state for i in done.cancelled]

    rig.settle()
    real, writes = rig.store.write, []
    first_write_may_go = threading.Event()

    def write(inserts: Sequence[Job], updates: Sequence[Job]) -> None:
        if not writes:  # the first cancel's write: let the other 15 queue behind it
            assert first_write_may_go.wait(30)
        writes.append([job.id for job in updates])
        real(inserts, updates)

    rig.store.write = write  # type: ignore[method-assign]
    with ThreadPoolExecutor(len(requests)) as pool:
        answers = [pool.submit(cancel, jobs) for jobs in requests]
        deadline = time.monotonic() + 30
        while rig.journal.queued_count() < len(requests) - 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        first_write_may_go.set()
        states = [state for answer in answers for state in answer.result(30)]
    assert states == [JobState.CANCELLED] * len(waiting)
    assert len(writes) == 2  # the first request's, then all the others'
    assert sorted(i for ids in writes for i in ids) == [job.id for job in waiting]
    for job in waiting:  # durable and in the book
        assert rig.store.get_job(job.id).state is JobState.CANCELLED  # type: ignore[union-attr]
        assert rig.state(job.id) is JobState.CANCELLED
    rig.advance(100)  # the running job ends: the scheduler heard every cancel, none starts
    assert all(job.id not in rig.processes.runs for job in waiting)


def test_a_change_that_raises_fails_only_its_own_caller(rig: LiveRig) -> None:
    job = rig.submit(100, gpus=1)
    other = rig.submit(100, gpus=1)
    rig.settle()

    def broken(current: Job) -> Job | None:
        raise ValueError("bad update")

    with pytest.raises(ValueError, match="bad update"):
        rig.journal.change(job.id, broken, rig.now)
    rig.verbs.cancel(other.id, rig.actor)
    assert rig.state(other.id) is JobState.CANCELLED and rig.state(job.id) is JobState.RUNNING
