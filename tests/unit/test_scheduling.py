"""The scheduling pass: who starts where, and why everyone else waits."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuyard.domain.job import REASON_PRIORITY, REASON_RESOURCES
from gpuyard.scheduling import PendingJob, Plan, SchedulingView, Start, plan
from gpuyard.scheduling.plan import NodeFree, priority_order_key


def in_order(jobs: Sequence[PendingJob]) -> list[PendingJob]:
    return sorted(jobs, key=lambda j: priority_order_key(j.priority, j.id))


def view_of(
    jobs: Sequence[PendingJob],
    gpus: Sequence[int] = (0, 1, 2, 3),
    cpus: int = 64,
    mem_mib: int = 1 << 20,
    *,
    early_exit: bool = False,
) -> SchedulingView:
    ordered = in_order(jobs)
    counts = dict(Counter(j.gpus for j in ordered)) if early_exit else None
    return SchedulingView(ordered, [NodeFree("local", list(gpus), cpus, mem_mib)], counts)


def started(result: Plan) -> dict[int, tuple[int, ...]]:
    return {s.job_id: s.gpus for s in result.starts}


# -- the worked example of plan.py's docstring -------------------------------------------------

A = PendingJob(1, gpus=2, priority=10)
B = PendingJob(2, gpus=4, priority=5)
C = PendingJob(3, gpus=1, priority=0)
D = PendingJob(4, gpus=4, priority=0)


def test_worked_example_of_the_docstring() -> None:
    for early_exit in (False, True):
        result = plan(view_of([D, C, B, A], early_exit=early_exit))
        assert result.starts == [
            Start(A.id, "local", (0, 1), "first fit"),
            Start(C.id, "local", (2,), "first fit"),
        ]
        assert result.reason_for(B.id) == REASON_RESOURCES
        assert result.reason_for(D.id) == REASON_PRIORITY


def test_plan_leaves_the_callers_view_untouched() -> None:
    view = view_of([A, B, C, D])
    plan(view)
    assert view.nodes[0].gpus == [0, 1, 2, 3]
    assert view.nodes[0].cpus == 64


# -- order and placement -------------------------------------------------------------------


def test_priority_order_key_higher_priority_first_then_submission_order() -> None:
    jobs = [PendingJob(5, 1, priority=0), PendingJob(2, 1, priority=0),
            PendingJob(9, 1, priority=3), PendingJob(1, 1, priority=-1)]  # fmt: skip
    assert [j.id for j in in_order(jobs)] == [9, 2, 5, 1]


def test_higher_priority_job_gets_the_scarce_gpus_even_if_submitted_later() -> None:
    early_low = PendingJob(1, gpus=2, priority=0)
    late_high = PendingJob(2, gpus=2, priority=1)
    result = plan(view_of([early_low, late_high], gpus=(0, 1)))
    assert started(result) == {2: (0, 1)}
    assert result.reason_for(1) == REASON_RESOURCES


def test_equal_priority_runs_in_submission_order() -> None:
    result = plan(view_of([PendingJob(2, 2), PendingJob(1, 2)], gpus=(0, 1)))
    assert started(result) == {1: (0, 1)}


def test_first_fit_takes_the_lowest_free_indices() -> None:
    result = plan(view_of([PendingJob(1, 2), PendingJob(2, 1)], gpus=(7, 3, 5, 1)))
    assert result.starts[0].gpus == (1, 3)
    assert result.starts[1].gpus == (5,)


def test_first_fit_uses_the_first_node_that_fits() -> None:
    nodes = [NodeFree("a", [0], 8, 1024), NodeFree("b", [0, 1, 2], 8, 1024)]
    view = SchedulingView([PendingJob(1, 2), PendingJob(2, 1)], nodes)
    result = plan(view)
    assert [(s.job_id, s.node, s.gpus) for s in result.starts] == [(1, "b", (0, 1)), (2, "a", (0,))]


def test_cpu_only_job_starts_without_gpus() -> None:
    result = plan(view_of([PendingJob(1, 0, cpus=2)], gpus=()))
    assert started(result) == {1: ()}


# -- reasons -------------------------------------------------------------------------------


def test_reasons_resources_first_then_priority_for_examined_and_unexamined_jobs() -> None:
    jobs = [PendingJob(1, 4), PendingJob(2, 3), PendingJob(3, 8), PendingJob(4, 5)]
    for early_exit in (False, True):
        result = plan(view_of(jobs, gpus=(0, 1), early_exit=early_exit))
        assert result.starts == []
        assert [result.reason_for(j.id) for j in jobs] == [
            REASON_RESOURCES, REASON_PRIORITY, REASON_PRIORITY, REASON_PRIORITY]  # fmt: skip


def test_early_exit_marks_the_next_job_resources_and_the_rest_priority() -> None:
    # Nothing is blocked when the pass stops: the next job is held back by resources,
    # and every job after it (not examined) by that one.
    jobs = [PendingJob(1, 2), PendingJob(2, 3), PendingJob(3, 3)]
    result = plan(view_of(jobs, gpus=(0, 1), early_exit=True))
    assert started(result) == {1: (0, 1)}
    assert result.reasons == {2: REASON_RESOURCES}
    assert result.rest_reason == REASON_PRIORITY
    assert result.reason_for(3) == REASON_PRIORITY


def test_rest_reason_is_resources_when_nothing_is_blocked() -> None:
    result = plan(view_of([PendingJob(1, 1)]))
    assert started(result) == {1: (0,)}
    assert result.rest_reason == REASON_RESOURCES


# -- CPU and memory ------------------------------------------------------------------------


def test_cpu_limit_holds_back_a_job_with_free_gpus() -> None:
    jobs = [PendingJob(1, 1, cpus=3), PendingJob(2, 1, cpus=2), PendingJob(3, 1, cpus=1)]
    result = plan(view_of(jobs, cpus=4))
    assert started(result) == {1: (0,), 3: (1,)}
    assert result.reason_for(2) == REASON_RESOURCES


def test_memory_limit_holds_back_a_job_with_free_gpus() -> None:
    jobs = [PendingJob(1, 1, mem_mib=6000), PendingJob(2, 1, mem_mib=3000),
            PendingJob(3, 1, mem_mib=2000)]  # fmt: skip
    result = plan(view_of(jobs, mem_mib=8192))
    assert started(result) == {1: (0,), 3: (1,)}
    assert result.reason_for(2) == REASON_RESOURCES


def test_no_free_cpu_starts_nothing() -> None:
    for early_exit in (False, True):
        result = plan(view_of([PendingJob(1, 0), PendingJob(2, 1)], cpus=0, early_exit=early_exit))
        assert result.starts == []
        assert result.reason_for(1) == REASON_RESOURCES
        assert result.reason_for(2) == REASON_PRIORITY


# -- early exit ----------------------------------------------------------------------------


def test_early_exit_stops_scanning_a_long_queue() -> None:
    jobs = [PendingJob(1, 2)] + [PendingJob(i, 4) for i in range(2, 10_002)]
    result = plan(view_of(jobs, gpus=(0, 1, 2, 3), early_exit=True))
    assert started(result) == {1: (0, 1)}
    assert len(result.reasons) <= 1  # the 10k waiting jobs were not examined one by one
    assert result.reason_for(2) == REASON_RESOURCES
    assert result.reason_for(10_001) == REASON_PRIORITY


def test_early_exit_does_not_stop_while_a_smaller_request_waits_further_down() -> None:
    jobs = [PendingJob(1, 4), PendingJob(2, 4), PendingJob(3, 4), PendingJob(4, 1)]
    result = plan(view_of(jobs, gpus=(0, 1), early_exit=True))
    assert started(result) == {4: (0,)}


jobs_strategy = st.lists(
    st.builds(
        lambda gpus, cpus, mem, prio: (gpus, cpus, mem, prio),
        st.integers(0, 8), st.integers(1, 4), st.sampled_from([0, 1024, 4096]), st.integers(0, 3),
    ),
    max_size=25,
)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(
    jobs_strategy,
    st.lists(st.integers(0, 15), unique=True, max_size=16),
    st.integers(0, 16),
    st.integers(0, 16384),
)
def test_early_exit_gives_the_same_starts_and_reasons_as_a_full_scan(
    raw: list[tuple[int, int, int, int]], free: list[int], cpus: int, mem: int
) -> None:
    jobs = [PendingJob(i + 1, g, c, m, p) for i, (g, c, m, p) in enumerate(raw)]
    full = plan(view_of(jobs, free, cpus, mem))
    fast = plan(view_of(jobs, free, cpus, mem, early_exit=True))
    assert fast.starts == full.starts
    for job in jobs:
        assert fast.reason_for(job.id) == full.reason_for(job.id)


# -- property: a simulated cluster driven by plan() ----------------------------------------


@dataclass
class Cluster:
    """The allocation state the server would keep: one or two nodes, jobs pending and running."""

    gpus: dict[str, int]
    cpus: int
    mem_mib: int
    pending: dict[int, PendingJob] = field(default_factory=dict)
    running: dict[int, tuple[PendingJob, str, tuple[int, ...]]] = field(default_factory=dict)
    next_id: int = 1

    def submit(self, gpus: int, cpus: int, mem_mib: int, priority: int) -> None:
        self.pending[self.next_id] = PendingJob(self.next_id, gpus, cpus, mem_mib, priority)
        self.next_id += 1

    def free_nodes(self) -> list[NodeFree]:
        nodes = []
        for name, count in self.gpus.items():
            mine = [r for r in self.running.values() if r[1] == name]
            held = {g for _, _, gs in mine for g in gs}
            nodes.append(NodeFree(
                name, [g for g in range(count) if g not in held],
                self.cpus - sum(j.cpus for j, _, _ in mine),
                self.mem_mib - sum(j.mem_mib for j, _, _ in mine),
            ))  # fmt: skip
        return nodes


def fits(job: PendingJob, nodes: Sequence[NodeFree]) -> bool:
    return any(
        len(n.gpus) >= job.gpus and n.cpus >= job.cpus and n.mem_mib >= job.mem_mib for n in nodes
    )


def take(nodes: list[NodeFree], start: Start, job: PendingJob) -> None:
    node = next(n for n in nodes if n.name == start.node)
    assert set(start.gpus) <= set(node.gpus), f"job {job.id} got GPUs that were not free"
    node.gpus = [g for g in node.gpus if g not in start.gpus]
    node.cpus -= job.cpus
    node.mem_mib -= job.mem_mib
    assert node.cpus >= 0, f"job {job.id} overcommits CPUs on {node.name}"
    assert node.mem_mib >= 0, f"job {job.id} overcommits memory on {node.name}"


def check_pass(cluster: Cluster, result: Plan) -> None:
    order = in_order(list(cluster.pending.values()))
    by_id = {s.job_id: s for s in result.starts}
    assert len(by_id) == len(result.starts), "a job was started twice"
    assert set(by_id) <= set(cluster.pending), "a job that is not pending was started"
    # (b) every started job gets exactly the GPUs it asked for, distinct and real
    for s in result.starts:
        job = cluster.pending[s.job_id]
        assert len(s.gpus) == job.gpus and len(set(s.gpus)) == job.gpus
        assert s.node in cluster.gpus and all(0 <= g < cluster.gpus[s.node] for g in s.gpus)
    # (a) no GPU held by two jobs, (c) greedy priority: walking the queue in order, every
    # job left pending did not fit in what the more important starts had left free.
    nodes = cluster.free_nodes()
    first_waiting = True
    for job in order:
        start = by_id.get(job.id)
        if start is not None:
            take(nodes, start, job)
            continue
        assert not fits(job, nodes), f"job {job.id} fit at its turn but was left waiting"
        expected = REASON_RESOURCES if first_waiting else REASON_PRIORITY
        assert result.reason_for(job.id) == expected
        first_waiting = False
    # No idle GPU while a fitting job waits.
    for job in order:
        if job.id not in by_id:
            assert not fits(job, nodes), f"job {job.id} waits though it fits in what is free"


def apply(cluster: Cluster, result: Plan) -> None:
    for s in result.starts:
        cluster.running[s.job_id] = (cluster.pending.pop(s.job_id), s.node, s.gpus)
    held = [(node, g) for _, node, gs in cluster.running.values() for g in gs]
    assert len(held) == len(set(held)), "a GPU is held by two running jobs"


events = st.lists(
    st.one_of(
        st.just(("pass",)),
        st.tuples(st.just("end"), st.integers(0, 30)),
        st.tuples(st.just("submit"), st.integers(0, 8), st.integers(1, 4),
                  st.sampled_from([0, 2048, 4096]), st.integers(0, 3)),
    ),
    max_size=30,
)  # fmt: skip


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    node_gpus=st.lists(st.integers(0, 16), min_size=1, max_size=2),
    cpus=st.integers(1, 16),
    mem_mib=st.sampled_from([4096, 8192, 1 << 20]),
    initial=jobs_strategy,
    script=events,
    early_exit=st.booleans(),
)
def test_simulated_passes_never_double_book_and_respect_priority(
    node_gpus: list[int],
    cpus: int,
    mem_mib: int,
    initial: list[tuple[int, int, int, int]],
    script: list[tuple[object, ...]],
    early_exit: bool,
) -> None:
    cluster = Cluster({f"n{i}": g for i, g in enumerate(node_gpus)}, cpus, mem_mib)
    for raw in initial:
        cluster.submit(*raw)
    for event in [*script, ("pass",)]:
        if event[0] == "end" and cluster.running:
            ids = sorted(cluster.running)
            del cluster.running[ids[int(event[1]) % len(ids)]]  # type: ignore[call-overload]
        elif event[0] == "submit":
            cluster.submit(*event[1:])  # type: ignore[arg-type]
        elif event[0] == "pass":
            order = in_order(list(cluster.pending.values()))
            counts = dict(Counter(j.gpus for j in order)) if early_exit else None
            result = plan(SchedulingView(order, cluster.free_nodes(), counts))
            check_pass(cluster, result)
            apply(cluster, result)
