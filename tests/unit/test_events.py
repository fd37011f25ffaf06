"""The events ring: which job changes are events, drains and hot GPUs compared with what the
ring last heard, the ring's bound, and a subscriber woken by an event added from another
thread."""

from __future__ import annotations

import asyncio
import dataclasses
import threading

from gpuyard.domain.job import REASON_PREEMPTED, Drain, Job, JobSpec
from gpuyard.domain.states import JobState
from gpuyard.services.jobs.journal import JobChange
from gpuyard.services.machine.event_ring import EventLog, classify


def _job(state: JobState, **fields: object) -> Job:
    spec = JobSpec(argv=("python", "train.py"), name="train", workdir="/")
    return Job(7, spec, "alice", state, 0.0, **fields)  # type: ignore[arg-type]


def _change(before: Job | None, after: Job) -> JobChange:
    return JobChange(before, after, 100.0)


def test_the_job_changes_that_are_events() -> None:
    running = _job(JobState.RUNNING)
    kinds = {
        "oom": _change(running, dataclasses.replace(running, state=JobState.OUT_OF_MEMORY)),
        "idle": _change(
            running,
            dataclasses.replace(
                running,
                state=JobState.CANCELLED,
                reason="Idle: its GPUs stayed below 5%",
            ),
        ),
        "preempted": _change(
            running,
            dataclasses.replace(
                running,
                state=JobState.PENDING,
                reason=REASON_PREEMPTED,
                restarts=1,
            ),
        ),
        "requeued": _change(
            running,
            dataclasses.replace(
                running,
                state=JobState.PENDING,
                reason="Requeued",
                restarts=1,
            ),
        ),
        "gpu failed": _change(running, dataclasses.replace(running, state=JobState.NODE_FAIL)),
    }
    found = {name: classify(change) for name, change in kinds.items()}
    assert {name: kind[0] for name, kind in found.items() if kind} == {
        "oom": "oom_kill", "idle": "idle_cancel", "preempted": "preemption",
        "requeued": "requeue", "gpu failed": "node_fail",
    }  # fmt: skip
    assert all("job 7 (train, alice)" in kind[1] for kind in found.values() if kind)
    # Not events: a submit, a start, a plain end, a cancel by hand.
    pending = _job(JobState.PENDING)
    assert classify(_change(None, pending)) is None
    assert classify(_change(pending, running)) is None
    assert (
        classify(_change(running, dataclasses.replace(running, state=JobState.COMPLETED))) is None
    )
    cancelled = dataclasses.replace(running, state=JobState.CANCELLED, reason="cancelled")
    assert classify(_change(running, cancelled)) is None


def test_drains_are_told_once_and_resumes_when_they_go() -> None:
    log = EventLog()
    log.drains_in_force({})
    xid = Drain("XID 79: the GPU has fallen off the bus; it needs a reset", "auto", 50.0)
    log.drain_changed(1, xid)
    log.drain_changed(1, xid)  # the same drain: no news
    log.drain_changed(0, Drain("maintenance", "admin", 60.0))
    log.hot_now({0: "at 91 C"})
    log.hot_now({0: "at 91 C"})  # still hot for the same reason: no news
    log.drain_changed(1, None)
    log.drain_changed(3, None)  # a resume of a drain the ring never heard of: no news
    assert [(e.kind, e.gpu) for e in log.recent()] == [
        ("xid", 1), ("drain", 0), ("hot", 0), ("resume", 1),
    ]  # fmt: skip
    assert [e.id for e in log.recent(after_id=2)] == [3, 4]
    assert [e.kind for e in log.recent(since_at=55.0)][:1] == ["drain"]


def test_the_drains_in_force_at_a_start_are_told_once() -> None:
    log = EventLog()
    log.drains_in_force({2: Drain("fan", "admin", 10.0), 0: Drain("xid 48", "auto", 5.0)})
    log.drain_changed(2, Drain("fan", "admin", 10.0))  # the same drain: no news
    assert [(e.kind, e.gpu, e.at) for e in log.recent()] == [("xid", 0, 5.0), ("drain", 2, 10.0)]


def test_the_ring_keeps_the_last_events_only() -> None:
    log = EventLog(size=3)
    for n in range(5):
        log.add("drain", f"GPU {n}", gpu=n)
    assert [e.gpu for e in log.recent()] == [2, 3, 4]
    assert log.oldest_id() == 3 and log.last_id == 5


def test_a_subscriber_is_woken_by_an_event_from_another_thread() -> None:
    log = EventLog()

    async def follow() -> list[str]:
        async with log.subscribe() as woken:
            threading.Thread(target=lambda: log.add("resume", "GPU 0 resumed", gpu=0)).start()
            await asyncio.wait_for(woken.wait(), 30)
            return [e.message for e in log.recent()]

    assert asyncio.run(follow()) == ["GPU 0 resumed"]


def test_a_stream_resumed_from_a_previous_server_life_starts_again() -> None:
    """An EventSource reconnecting after a restart sends an id of the old ring: it gets
    `resync` and every event kept, not silence until the new ids pass the old one."""
    from gpuyard.api.routers.live import _event_frames
    from gpuyard.domain.principal import Principal

    log = EventLog()
    log.add("resume", "GPU 0 resumed", gpu=0)

    async def first_frames() -> list[bytes]:
        frames = _event_frames(log, Principal("alice"), 500, None)
        try:
            return [await anext(frames) for _ in range(3)]
        finally:
            await frames.aclose()

    frames = asyncio.run(first_frames())
    assert frames[1].startswith(b"event: resync")
    assert b"GPU 0 resumed" in frames[2]
