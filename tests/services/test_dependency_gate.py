"""Dependencies, array caps and singleton in the live scheduler's gate: the server's own wiring
(LiveRig: Controller, LiveScheduler, the job use cases, a real SQLite store) in simulated time."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuyard.adapters.store.sql import SqlJobStore, sqlite_url
from gpuyard.domain.dependency import Ref
from gpuyard.domain.errors import InvalidRequest
from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.principal import Principal
from gpuyard.domain.states import JobState
from gpuyard.scheduling.policies import make_policy
from gpuyard.services.jobs.book import JobBook
from gpuyard.services.jobs.dependencies import NamedJobs
from gpuyard.services.ports import ExitStatus
from tests.services.conftest import MakeRig
from tests.services.live_harness import LiveRig


def rig_at(tmp_path: Path, gpus: int = 8) -> LiveRig:
    return LiveRig(tmp_path, make_policy("fifo", for_server=True), gpus)


@pytest.fixture
def rig(live_rig: MakeRig) -> LiveRig:
    return live_rig("fifo", gpus=8)


def fail(rig: LiveRig, job: Job) -> None:
    """The job's processes exit 1 now."""
    rig.processes.runs.pop(job.id)
    rig.controller.on_exit(job.id, ExitStatus(exit_code=1, ended_at=rig.now))
    rig.settle()


def why(rig: LiveRig, job: Job) -> str:
    return rig.reads.reason(rig.job(job.id))


def array(rig: LiveRig, n: int, work_s: float, *, cap: int = 0, dep: str = "") -> list[Job]:
    spec = JobSpec(argv=("t",), name="arr", workdir="/", gpus=1, array_max_running=cap,
                   dependency=dep)  # fmt: skip
    tasks = rig.submits.submit_array([spec] * n, list(range(n)), rig.actor)
    for task in tasks:
        rig.processes.work_s[task.id] = work_s
    return tasks


def test_afterok_runs_after_success_and_is_never_satisfied_after_a_failure(
    rig: LiveRig,
) -> None:
    good, bad = rig.submit(100, gpus=1), rig.submit(100, gpus=1)
    after_good = rig.submit(10, gpus=1, dependency=f"afterok:{good.id}")
    after_bad = rig.submit(10, gpus=1, dependency=f"afterok:{bad.id}")
    chained = rig.submit(10, gpus=1, dependency=f"afterok:{after_bad.id}")
    rescue = rig.submit(10, gpus=1, dependency=f"afternotok:{bad.id}")
    whatever = rig.submit(10, gpus=1, dependency=f"afterany:{bad.id}:{good.id}")
    rig.settle()
    assert [rig.state(j.id) for j in (good, bad)] == [JobState.RUNNING] * 2
    for job in (after_good, after_bad, chained, rescue, whatever):
        assert rig.state(job.id) is JobState.PENDING and why(rig, job) == "Dependency"
    rig.now = 50.0
    fail(rig, bad)
    for job in (after_bad, chained):  # the chain behind it too, in one go: pending, as Slurm
        assert rig.state(job.id) is JobState.PENDING
        assert why(rig, job) == "DependencyNeverSatisfied"
    assert rig.state(rescue.id) is JobState.RUNNING
    assert rig.state(after_good.id) is JobState.PENDING
    assert rig.state(whatever.id) is JobState.PENDING  # good has not ended yet
    rig.advance(100.0)
    assert rig.state(after_good.id) is JobState.RUNNING
    assert rig.state(whatever.id) is JobState.RUNNING


def test_afternotok_is_never_satisfied_by_a_success(rig: LiveRig) -> None:
    first = rig.submit(10, gpus=1)
    cleanup = rig.submit(10, gpus=1, dependency=f"afternotok:{first.id}")
    rig.settle()
    rig.advance(10.0)
    assert rig.state(first.id) is JobState.COMPLETED
    assert why(rig, cleanup) == "DependencyNeverSatisfied"
    assert rig.state(cleanup.id) is JobState.PENDING  # Slurm's default: its owner cancels it


def test_a_dependent_never_reaches_the_policy_early(tmp_path: Path) -> None:
    """One GPU, FIFO: an older dependent must not block a younger job while it waits."""
    rig = rig_at(tmp_path, gpus=2)
    try:
        first = rig.submit(100, gpus=1)
        waiting = rig.submit(10, gpus=2, dependency=f"afterok:{first.id}")
        younger = rig.submit(10, gpus=1)
        rig.settle()
        assert rig.state(younger.id) is JobState.RUNNING
        assert why(rig, waiting) == "Dependency"
        assert rig.scheduler.estimated_starts().get(waiting.id) is None
    finally:
        rig.close()


def test_an_array_cap_keeps_at_most_n_tasks_running(rig: LiveRig) -> None:
    tasks = array(rig, 6, 100, cap=2)
    rig.settle()
    states = [rig.state(t.id) for t in tasks]
    assert states.count(JobState.RUNNING) == 2
    assert [why(rig, t) for t in tasks[2:]] == ["JobArrayTaskLimit"] * 4
    rig.verbs.cancel(tasks[3].id, rig.actor)  # a waiting task cancelled frees nothing
    rig.settle()
    assert [rig.state(t.id) for t in tasks].count(JobState.RUNNING) == 2
    rig.advance(100.0)
    running = [t.array_task_id for t in tasks if rig.state(t.id) is JobState.RUNNING]
    assert running == [2, 4]  # the next by index, past the cancelled one
    rig.advance(200.0)
    assert [t.array_task_id for t in tasks if rig.state(t.id) is JobState.RUNNING] == [5]


def test_afterok_on_an_array_waits_for_every_task_and_aftercorr_for_its_own(
    rig: LiveRig,
) -> None:
    first = array(rig, 3, 100)
    rig.processes.work_s[first[1].id] = 10  # task 1 ends first
    whole = rig.submit(10, gpus=1, dependency=f"afterok:{first[0].id}")
    one = rig.submit(10, gpus=1, dependency=f"afterok:{first[0].id}_1")
    corr = array(rig, 3, 10, dep=f"aftercorr:{first[0].id}")
    rig.settle()
    rig.advance(10.0)
    assert rig.state(one.id) is JobState.RUNNING
    assert [rig.state(t.id) for t in corr] == [
        JobState.PENDING, JobState.RUNNING, JobState.PENDING
    ]  # fmt: skip
    assert rig.state(whole.id) is JobState.PENDING
    rig.advance(100.0)
    assert rig.state(whole.id) is JobState.RUNNING
    assert all(rig.state(t.id) is not JobState.PENDING for t in corr)


def test_singleton_runs_one_job_of_a_name_at_a_time(rig: LiveRig) -> None:
    jobs = [rig.submit(100, gpus=1, name="etl", dependency="singleton") for _ in range(3)]
    other = rig.submit(100, gpus=1, name="other", dependency="singleton")
    rig.settle()
    assert [rig.state(j.id) for j in jobs] == [JobState.RUNNING] + [JobState.PENDING] * 2
    assert why(rig, jobs[1]) == "Dependency"
    assert rig.state(other.id) is JobState.RUNNING
    rig.advance(100.0)
    assert [rig.state(j.id) for j in jobs][1:] == [JobState.RUNNING, JobState.PENDING]


def test_a_dependency_on_a_job_that_does_not_exist_or_is_not_yours_is_refused(
    rig: LiveRig,
) -> None:
    theirs = rig.submit(10, gpus=1, user="bob")
    spec = JobSpec(argv=("t",), name="t", workdir="/", dependency="afterok:999")
    with pytest.raises(InvalidRequest, match="names job 999, which does not exist"):
        rig.submits.submit(spec, Principal("ada"))
    spec = JobSpec(argv=("t",), name="t", workdir="/", dependency=f"afterany:{theirs.id}")
    with pytest.raises(InvalidRequest, match=f"names job {theirs.id}"):
        rig.submits.submit(spec, Principal("ada"))
    tasks = array(rig, 2, 10)
    spec = JobSpec(argv=("t",), name="t", workdir="/", dependency=f"afterok:{tasks[0].id}_7")
    with pytest.raises(InvalidRequest, match=f"names job {tasks[0].id}_7"):
        rig.submits.submit(spec, rig.actor)
    assert rig.submits.submit(spec.__class__(argv=("t",), name="t", workdir="/",
                              dependency=f"afterok:{tasks[0].id}_1"), rig.actor)  # fmt: skip


def test_a_restart_judges_dependencies_again_from_the_stored_jobs(tmp_path: Path) -> None:
    rig = rig_at(tmp_path)
    first = rig.submit(100, gpus=1)
    failed = rig.submit(5, gpus=1)
    tasks = array(rig, 4, 50, cap=1)
    after = rig.submit(10, gpus=1, dependency=f"afterok:{first.id}")
    after_failed = rig.submit(10, gpus=1, dependency=f"afterok:{failed.id}")
    rig.settle()
    rig.store.write([], [rig.job(failed.id).transition(JobState.FAILED, exit_code=1,
                                                       ended_at=1.0)])  # fmt: skip
    rig.close()  # the server stops; `failed` ended meanwhile (as its record says)
    rig = rig_at(tmp_path)
    try:
        rig.processes.work_s.update({first.id: 100, **{t.id: 50 for t in tasks}, after.id: 10})
        rig.controller.recover()  # what the server does at start
        rig.settle()
        assert why(rig, rig.job(after.id)) == "Dependency"
        assert why(rig, rig.job(after_failed.id)) == "DependencyNeverSatisfied"
        assert rig.state(after_failed.id) is JobState.PENDING
        # The running task and the first job were requeued (simulated processes do not
        # survive a restart): the cap still holds.
        assert [rig.state(t.id) for t in tasks].count(JobState.RUNNING) == 1
        assert [why(rig, t) for t in tasks[1:]] == ["JobArrayTaskLimit"] * 3
        rig.advance(100.0)
        assert rig.state(first.id) is JobState.COMPLETED
        assert rig.state(after.id) is JobState.RUNNING
    finally:
        rig.close()


def test_the_lookup_finds_jobs_the_book_no_longer_keeps(rig: LiveRig, tmp_path: Path) -> None:
    done = rig.submit(1, gpus=1)
    tasks = array(rig, 3, 1)
    rig.settle()
    rig.advance(1.0)
    store = SqlJobStore(sqlite_url(tmp_path / "gpuyard.db"))
    named = NamedJobs(JobBook(), store)  # an empty book: everything from the store
    try:
        [job] = named(Ref(done.id))
        assert job.state is JobState.COMPLETED and job.exit_code == 0
        assert [n.id for n in named(Ref(tasks[0].id))] == [t.id for t in tasks]
        assert [n.id for n in named(Ref(tasks[0].id, 2))] == [tasks[2].id]
        assert named(Ref(12345)) == []
    finally:
        store.close()
    reads: list[int] = []

    class Counting:  # the rig's store, counting the array reads a pass would make
        def array_tasks(self, array_id: int) -> list[Job]:
            reads.append(array_id)
            return rig.store.array_tasks(array_id)

        def get_job(self, job_id: int) -> Job | None:
            return rig.store.get_job(job_id)

    kept = NamedJobs(rig.book, Counting())  # type: ignore[arg-type]
    assert [n.id for n in kept(Ref(tasks[0].id))] == [t.id for t in tasks]
    assert reads == []  # the book keeps the whole array: no database read in the pass


def test_after_starts_once_the_job_named_started_and_its_minutes_passed(rig: LiveRig) -> None:
    first = rig.submit(1_000, gpus=1)
    right_after = rig.submit(10, gpus=1, dependency=f"after:{first.id}")
    later = rig.submit(10, gpus=1, dependency=f"after:{first.id}+2")
    rig.settle()
    assert rig.state(right_after.id) is JobState.RUNNING  # the pass after first's start
    assert why(rig, later) == "Dependency"
    assert rig.scheduler.next_pass_at == 120.0  # the scheduler asks to be woken then
    while rig.state(later.id) is JobState.PENDING:
        rig.advance(rig.next_time())
    assert rig.job(later.id).started_at == 120.0


def test_a_held_task_does_not_take_a_place_under_its_arrays_cap(rig: LiveRig) -> None:
    tasks = array(rig, 3, 100, cap=1)
    rig.verbs.hold(tasks[0].id, rig.actor)
    rig.settle()
    assert why(rig, tasks[0]) == "JobHeldUser"
    assert [rig.state(t.id) for t in tasks][1:] == [JobState.RUNNING, JobState.PENDING]
    rig.verbs.release(tasks[0].id, rig.actor)
    rig.settle()
    assert why(rig, tasks[0]) == "JobArrayTaskLimit"
    rig.advance(100.0)
    assert rig.state(tasks[0].id) is JobState.RUNNING  # before task 2: by index
    assert why(rig, tasks[2]) == "JobArrayTaskLimit"
