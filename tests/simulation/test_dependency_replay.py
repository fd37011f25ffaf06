"""Dependencies and array caps in the simulator: known answers, and the same decisions as the
live server's gate (LiveRig) on a contended trace with chains, failures and capped arrays."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from gpuyard.domain.errors import InvalidRequest
from gpuyard.domain.job import JobSpec
from gpuyard.domain.principal import Principal
from gpuyard.domain.states import JobState
from gpuyard.scheduling.cluster import ClusterState, NodeSpec
from gpuyard.scheduling.policies import make_policy
from gpuyard.services.ports import ExitStatus
from gpuyard.simulation.engine import Replay
from gpuyard.simulation.replay import simulate
from gpuyard.simulation.trace import TraceJob, load_trace
from tests.services.live_harness import LiveRig, Recording
from tests.services.test_live_scheduling import LIVE_POLICIES

Events = list[tuple[str, float, int]]


def _ends(trace: list[TraceJob], gpus: int = 4) -> tuple[dict[int, float], list[int]]:
    done = Replay(trace, make_policy("fifo"), ClusterState.uniform(gpus, gpus)).run()
    return {o.id: o.finished_at for o in done.jobs}, done.cancelled


def test_a_chain_runs_link_after_link_and_a_failure_cancels_what_needed_success() -> None:
    trace = [
        TraceJob(1, "a", 0.0, 1, 100.0),
        TraceJob(2, "a", 0.0, 1, 50.0, dependency="afterok:1"),
        TraceJob(3, "a", 0.0, 1, 10.0, dependency="afterok:2", exit_code=0),
        TraceJob(4, "b", 0.0, 1, 30.0, exit_code=1),
        TraceJob(5, "b", 0.0, 1, 30.0, dependency="afterok:4"),  # never
        TraceJob(6, "b", 0.0, 1, 30.0, dependency="afterok:5"),  # never, by cascade
        TraceJob(7, "b", 0.0, 1, 5.0, dependency="afternotok:5"),  # 5 was cancelled: runs
        TraceJob(8, "b", 0.0, 1, 5.0, dependency="afterany:4?afterok:1"),
    ]
    ends, cancelled = _ends(trace)
    assert ends == {1: 100.0, 2: 150.0, 3: 160.0, 4: 30.0, 7: 35.0, 8: 35.0}
    assert cancelled == [5, 6]


def test_an_array_cap_keeps_at_most_n_tasks_running() -> None:
    trace = [TraceJob(10 + i, "a", 0.0, 1, 100.0, array_job_id=10, array_task_id=i,
                      array_max_running=2) for i in range(5)]  # fmt: skip
    trace.append(TraceJob(20, "a", 0.0, 1, 1.0, dependency="afterok:10"))  # the whole array
    ends, _ = _ends(trace, gpus=8)  # room for all: only the cap holds them back
    assert ends == {10: 100.0, 11: 100.0, 12: 200.0, 13: 200.0, 14: 300.0, 20: 301.0}


def test_singleton_runs_one_job_of_a_name_at_a_time_in_submit_order() -> None:
    trace = [TraceJob(i, "a", float(i), 1, 100.0, name="etl", dependency="singleton")
             for i in (1, 2, 3)] + [TraceJob(4, "a", 0.0, 1, 100.0, name="etl")]  # fmt: skip
    ends, _ = _ends(trace, gpus=8)
    assert ends == {1: 101.0, 2: 201.0, 3: 301.0, 4: 100.0}


def test_after_with_a_delay_waits_that_long_after_the_start() -> None:
    trace = [TraceJob(1, "a", 0.0, 1, 1_000.0), TraceJob(2, "a", 0.0, 1, 1.0,
                                                         dependency="after:1+5")]  # fmt: skip
    ends, _ = _ends(trace)
    assert ends == {1: 1_000.0, 2: 301.0}


def test_a_trace_naming_a_later_or_unknown_job_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(
        "job_id,user,submit_time_s,num_gpus,duration_s,dependency\n"
        "1,a,0,1,10,afterok:2\n2,a,5,1,10,\n"
    )
    with pytest.raises(InvalidRequest, match="job 1 depends on job 2, which the trace does not"):
        simulate(path, gpus=2)
    path.write_text("job_id,user,submit_time_s,num_gpus,duration_s,dependency\n1,a,0,1,10,ok:2\n")
    with pytest.raises(InvalidRequest, match="job 1: --dependency 'ok:2'"):
        simulate(path, gpus=2)


def test_trace_columns_load(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(
        "job_id,user,submit_time_s,num_gpus,duration_s,dependency,name,array_job_id,"
        "array_task_id,array_max_running,exit_code\n"
        "1,a,0,1,10,,x,1,0,1,0\n2,a,0,1,10,,x,1,1,1,3\n3,a,0,1,10,afterany:1,y,,,,\n"
    )
    jobs = load_trace(path)
    assert jobs[1].array_job_id == 1 and jobs[1].array_task_id == 1 and jobs[1].exit_code == 3
    assert jobs[2].dependency == "afterany:1" and jobs[2].array_job_id is None
    report = simulate(path, gpus=2)[0]
    assert report.jobs == 3


# -- the live gate and the simulated one decide alike --------------------------------------------


def workflow_trace(seed: int, items: int = 40) -> list[TraceJob]:
    """Jobs of three users on 8 GPUs: single jobs, capped arrays, dependencies of every kind on
    earlier jobs (some of which fail), singleton names."""
    rng = random.Random(seed)
    trace: list[TraceJob] = []
    t, next_id = 0.0, 1
    for _ in range(items):
        t += rng.choice([0, 0, 30, 120, 600])
        user = rng.choice("abc")
        duration = float(rng.randint(10, 3_000))
        gpus = rng.choice([1, 1, 2, 4])
        dep = ""
        mine = [j for j in trace if j.user == user]  # a user may name only jobs they see
        if mine and rng.random() < 0.5:
            target = rng.choice(mine)
            ref = target.array_job_id if target.array_job_id and rng.random() < 0.5 else target.id
            dep = f"{rng.choice(['afterok', 'afterany', 'afternotok'])}:{ref}"
        if rng.random() < 0.1:
            dep = ",".join(filter(None, [dep, "singleton"]))
        exit_code = 1 if rng.random() < 0.2 else 0
        if rng.random() < 0.2:  # an array
            size, cap = rng.randint(2, 6), rng.randint(1, 3)
            first = next_id
            for i in range(size):
                trace.append(TraceJob(next_id, user, t, 1, duration + i, time_limit_s=duration + i,
                                      dependency=dep, array_job_id=first, array_task_id=i,
                                      array_max_running=cap, exit_code=exit_code,
                                      name="arr"))  # fmt: skip
                next_id += 1
            continue
        trace.append(TraceJob(next_id, user, t, gpus, duration, time_limit_s=duration,
                              dependency=dep, exit_code=exit_code,
                              name=f"n{next_id % 3}"))  # fmt: skip
        next_id += 1
    return trace


def simulated(trace: list[TraceJob], policy: str) -> tuple[Events, list[int]]:
    recorder = Recording(make_policy(policy))
    cluster = ClusterState([NodeSpec("node0", 8)])
    done = Replay(trace, recorder, cluster, restart_penalty_s=0.0).run()  # type: ignore[arg-type]
    return recorder.events, done.cancelled


def live(tmp_path: Path, trace: list[TraceJob], policy: str) -> tuple[Events, list[int]]:
    recorder = Recording(make_policy(policy, for_server=True))
    rig = LiveRig(tmp_path, recorder, 8)  # type: ignore[arg-type]
    codes = {t.id: t.exit_code for t in trace}

    def end_due() -> None:
        procs = rig.processes
        for job_id, started in sorted(procs.runs.items()):
            if started + procs.work_s[job_id] <= rig.now:
                del procs.runs[job_id]
                assert procs.on_exit is not None
                procs.on_exit(job_id, ExitStatus(exit_code=codes[job_id], ended_at=rig.now))

    rig.processes.end_due = end_due  # type: ignore[method-assign]
    try:
        rig.replay(trace, lambda arrivals: _submit(rig, arrivals))
        jobs = rig.book.jobs(include_finished=True)
        # The live server leaves them pending (Slurm's default), the replay cancels them: the
        # same jobs, never seen by the policy.
        assert not [j for j in jobs if j.state is JobState.CANCELLED]
        never = sorted(j.id for j in jobs if j.state is JobState.PENDING
                       and rig.reads.reason(j) == "DependencyNeverSatisfied")  # fmt: skip
        return recorder.events, never
    finally:
        rig.close()


def _submit(rig: LiveRig, arrivals: list[TraceJob]) -> None:
    t = arrivals.pop(0)
    spec = JobSpec(argv=("train",), name=t.name, workdir="/", gpus=t.gpus,
                   time_limit_s=int(t.time_limit_s or 0) or None, preemptible=t.preemptible,
                   dependency=t.dependency, array_max_running=t.array_max_running)  # fmt: skip
    if t.array_job_id is None:
        job = rig.submits.submit(spec, Principal(t.user))
        rig.processes.work_s[job.id] = t.duration_s
        assert job.id == t.id
        return
    tasks = [t]
    while arrivals and arrivals[0].array_job_id == t.array_job_id:
        tasks.append(arrivals.pop(0))
    specs = [
        JobSpec(
            **{
                **{f: getattr(spec, f) for f in spec.__slots__},  # type: ignore[attr-defined]
                "time_limit_s": int(task.time_limit_s or 0) or None,
            }
        )
        for task in tasks
    ]
    made = rig.submits.submit_array(specs, [task.array_task_id or 0 for task in tasks],
                                    Principal(t.user))  # fmt: skip
    for job, task in zip(made, tasks, strict=True):
        assert job.id == task.id and job.array_job_id == t.array_job_id
        rig.processes.work_s[job.id] = task.duration_s


@pytest.mark.parametrize("policy", LIVE_POLICIES)
def test_live_gate_and_simulated_gate_decide_alike(tmp_path: Path, policy: str) -> None:
    trace = workflow_trace(seed=5)
    events, cancelled = simulated(trace, policy)
    assert cancelled, "the trace must have a dependency that can never hold"
    assert any(t.array_max_running for t in trace) and any(
        "singleton" in t.dependency for t in trace
    )
    assert live(tmp_path, trace, policy) == (events, cancelled)
