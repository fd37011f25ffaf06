"""`--dependency` in Slurm's syntax: parsing, the evaluation table, and the gate's workflow
stages (dependencies, array caps, singleton) driven directly."""

from __future__ import annotations

import pytest

from gpuyard.domain.dependency import (
    Dependency,
    Never,
    Ref,
    Satisfied,
    Tally,
    Term,
    Waiting,
    evaluate,
    judge,
    parse_dependency,
)
from gpuyard.domain.errors import InvalidRequest
from gpuyard.domain.spec_rules import SpecDraft, decide_spec
from gpuyard.domain.states import JobState
from gpuyard.scheduling.workflow_gate import GateJob, Named, WorkflowGate


def test_parse_every_kind_and_both_joins() -> None:
    dep = parse_dependency("afterok:12:13_4,afterany:7,singleton")
    assert dep == Dependency(
        (Term("afterok", (Ref(12), Ref(13, 4))), Term("afterany", (Ref(7),))), False, True
    )
    either = parse_dependency("afternotok:3?aftercorr:9?after:5+10")
    assert either.any_of and [t.kind for t in either.terms] == ["afternotok", "aftercorr", "after"]
    assert either.terms[2].refs == (Ref(5, None, 600.0),)
    assert parse_dependency("") == Dependency() and parse_dependency("").empty
    assert parse_dependency("singleton") == Dependency(singleton=True)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("afterok", "names no job"),
        ("afterok:", "names no job"),
        ("afterok:x", "is not a job id"),
        ("afterok:0", "is not a job id"),
        ("afterok:12_", "is not a job id"),
        ("after_ok:12", "a part is after, afterok"),
        ("expand:12", "a part is"),
        ("afterok:1,afterany:2?afterok:3", "either `,`"),
        ("afterok:12+5", "only after takes +MINUTES"),
        ("after:12+x", "only after takes +MINUTES"),
        ("singleton?afterok:1", "singleton joins other parts with `,`"),
    ],
)
def test_bad_syntax_is_one_line_naming_the_field(text: str, says: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_dependency(text)
    assert says in caught.value.message and caught.value.field == "dependency"
    assert "\n" not in caught.value.message and "e.g. afterok:12:13" in caught.value.message


def test_the_spec_rules_check_the_syntax() -> None:
    with pytest.raises(InvalidRequest, match="afterok:x"):
        decide_spec(SpecDraft(argv=("true",), dependency="afterok:x"), default_workdir="/")
    spec = decide_spec(SpecDraft(argv=("true",), dependency="afterok:3"), default_workdir="/")
    assert spec.dependency == "afterok:3"


PENDING = Tally(1)
RUNNING = Tally(1, began=1, last_began_at=100.0)
OK = Tally(1, ended=1, ok=1, began=1, last_began_at=100.0)
FAILED = Tally(1, ended=1, ok=0, began=1, last_began_at=100.0)
GONE = Tally(0)
S, W = Satisfied(), Waiting()


@pytest.mark.parametrize(
    ("kind", "tally", "verdict"),
    [
        ("afterok", PENDING, W), ("afterok", RUNNING, W), ("afterok", OK, S),
        ("afterok", FAILED, Never), ("afterok", GONE, S),
        ("afternotok", RUNNING, W), ("afternotok", FAILED, S), ("afternotok", OK, Never),
        ("afterany", RUNNING, W), ("afterany", OK, S), ("afterany", FAILED, S),
        ("aftercorr", OK, S), ("aftercorr", FAILED, Never),
        ("after", PENDING, W), ("after", RUNNING, S), ("after", FAILED, S),
        # an array of 3: two done OK, one running / one failed
        ("afterok", Tally(3, 2, 2, 3), W), ("afterok", Tally(3, 3, 2, 3), Never),
        ("afternotok", Tally(3, 2, 0, 3), W), ("afternotok", Tally(3, 3, 0, 3), S),
        ("afterany", Tally(3, 3, 1, 3), S),
    ],
)  # fmt: skip
def test_evaluation_table(kind: str, tally: Tally, verdict: object) -> None:
    got = judge(kind, Ref(7), tally, now=200.0)
    if verdict is Never:
        assert isinstance(got, Never) and "7" in got.why
    else:
        assert got == verdict


def test_after_with_minutes_waits_until_then() -> None:
    ref = Ref(7, None, 300.0)
    assert judge("after", ref, RUNNING, now=200.0) == Waiting(400.0)
    assert judge("after", ref, RUNNING, now=400.0) == S


def test_all_and_any_combine() -> None:
    known = {1: OK, 2: FAILED, 3: RUNNING}

    def at(text: str) -> object:
        return evaluate(parse_dependency(text), lambda ref: known[ref.job_id], now=0.0)

    assert at("afterok:1,afterany:2") == S
    assert isinstance(at("afterok:1,afterok:2"), Never)
    assert at("afterok:1,afterok:3") == W
    assert at("afterok:2?afterok:3") == W  # one can never hold; the other still may
    assert at("afterok:2?afterany:2") == S
    assert isinstance(at("afterok:2?afternotok:1"), Never)
    assert at("afterok:1:3") == W  # every id of a part must hold
    assert at("singleton") == S  # singleton is the gate's running limit, not judged here


def test_aftercorr_names_the_corresponding_task() -> None:
    seen: list[Ref] = []

    def lookup(ref: Ref) -> Tally:
        seen.append(ref)
        return OK

    assert evaluate(parse_dependency("aftercorr:20"), lookup, 0.0, task=4) == S
    assert seen == [Ref(20, 4)]


# -- the gate's workflow stages, driven directly --------------------------------------------------


class World:
    """Jobs the gate looks up, by id; arrays by their first task's id."""

    def __init__(self) -> None:
        self.jobs: dict[int, Named] = {}
        self.arrays: dict[int, list[int]] = {}
        self.lookups = 0

    def __call__(self, ref: Ref) -> list[Named]:
        self.lookups += 1
        if ref.task is not None:
            ids = self.arrays.get(ref.job_id, [])
            return [self.jobs[ids[ref.task]]] if ref.task < len(ids) else []
        ids = self.arrays.get(ref.job_id, [ref.job_id] if ref.job_id in self.jobs else [])
        return [self.jobs[i] for i in ids]

    def add(self, job_id: int, state: JobState = JobState.PENDING) -> None:
        self.jobs[job_id] = Named(job_id, state)


def gj(job_id: int, dep: str = "", **kw: object) -> GateJob:
    return GateJob(job_id, str(kw.pop("owner", "ada")), str(kw.pop("name", "j")),
                   parse_dependency(dep), **kw)  # type: ignore[arg-type]  # fmt: skip


def test_gate_releases_dependents_and_cascades_never() -> None:
    world = World()
    for job_id in range(1, 6):
        world.add(job_id)
    gate = WorkflowGate(world)
    assert gate.arrive(gj(2, "afterok:1"), 0.0) == "Dependency"
    assert gate.arrive(gj(3, "afterok:2"), 0.0) == "Dependency"
    assert gate.arrive(gj(4, "afternotok:2"), 0.0) == "Dependency"
    assert gate.arrive(gj(5, "afterany:1"), 0.0) == "Dependency"
    assert gate.take(0.0) == ([], [])
    gate.ended(1, JobState.FAILED, 1, 10.0)
    released, never = gate.take(10.0)
    assert released == [5, 4]  # 2 can never run, 3 cascades from it, then 4 (2 did not succeed)
    assert [job_id for job_id, _ in never] == [2, 3]
    assert gate.reason(2) == "DependencyNeverSatisfied" and gate.reason(4) is None
    gate.ended(2, JobState.CANCELLED, None, 11.0)  # the journal's cancel: counted once only
    assert gate.take(11.0) == ([], [])
    assert gate.reason(2) is None


def test_array_cap_lets_tasks_in_as_others_end_in_index_order() -> None:
    gate = WorkflowGate(World())
    tasks = [gj(10 + i, array_id=10, task=i, array_cap=2) for i in range(5)]
    reasons = [gate.arrive(t, 0.0) for t in tasks]
    assert reasons == [None, None, "JobArrayTaskLimit", "JobArrayTaskLimit", "JobArrayTaskLimit"]
    gate.ended(13, JobState.CANCELLED, None, 1.0)  # a waiting task cancelled: no slot freed
    assert gate.take(1.0) == ([], [])
    gate.ended(11, JobState.COMPLETED, 0, 2.0)
    assert gate.take(2.0) == ([12], [])
    gate.ended(10, JobState.FAILED, 1, 3.0)
    assert gate.take(3.0) == ([14], [])


def test_singleton_is_one_job_of_an_owner_and_name_at_a_time() -> None:
    gate = WorkflowGate(World())
    assert gate.arrive(gj(1, "singleton", name="etl"), 0.0) is None
    assert gate.arrive(gj(2, "singleton", name="etl"), 0.0) == "Dependency"
    assert gate.arrive(gj(3, "singleton", name="other"), 0.0) is None
    assert gate.arrive(gj(4, "singleton", name="etl", owner="bob"), 0.0) is None
    gate.ended(1, JobState.COMPLETED, 0, 5.0)
    assert gate.take(5.0) == ([2], [])


def test_a_whole_array_and_a_task_of_it() -> None:
    world = World()
    for i in range(3):
        world.add(20 + i)
    world.arrays[20] = [20, 21, 22]
    gate = WorkflowGate(world)
    gate.arrive(gj(30, "afterok:20"), 0.0)
    gate.arrive(gj(31, "afterok:20_1"), 0.0)
    gate.arrive(gj(40, "aftercorr:20", array_id=40, task=2), 0.0)
    gate.ended(21, JobState.COMPLETED, 0, 1.0)
    assert gate.take(1.0) == ([31], [])
    gate.ended(22, JobState.COMPLETED, 0, 2.0)
    assert gate.take(2.0) == ([40], [])
    gate.ended(20, JobState.COMPLETED, 0, 3.0)
    assert gate.take(3.0) == ([30], [])


def test_timed_after_is_asked_to_be_woken() -> None:
    world = World()
    world.jobs[1] = Named(1, JobState.RUNNING, None, 100.0)
    gate = WorkflowGate(world)
    assert gate.arrive(gj(2, "after:1+2"), 150.0) == "Dependency"
    assert gate.next_at() == 220.0
    assert gate.take(219.0) == ([], [])
    assert gate.take(220.0) == ([2], [])
    assert gate.next_at() is None


def test_an_unknown_job_lifts_the_dependency_and_lookups_are_shared() -> None:
    world = World()
    world.add(1)
    gate = WorkflowGate(world)
    assert gate.arrive(gj(2, "afterok:99"), 0.0) is None  # purged: Slurm lifts it
    for i in range(3, 50):
        gate.arrive(gj(i, "afterok:1"), 0.0)
    assert world.lookups == 2  # one per reference, not per dependent
    gate.ended(1, JobState.COMPLETED, 0, 1.0)
    released, _ = gate.take(1.0)
    assert released == list(range(3, 50))


def test_a_held_task_gives_its_place_under_the_cap_and_queues_again_on_release() -> None:
    gate = WorkflowGate(World())
    tasks = [gj(10 + i, array_id=10, task=i, array_cap=1) for i in range(3)]
    assert [gate.arrive(t, 0.0) for t in tasks] == [None, "JobArrayTaskLimit", "JobArrayTaskLimit"]
    gate.step_aside(10)  # task 0 held before it started
    assert gate.take(1.0) == ([11], [])
    gate.step_aside(12)  # a waiting task held: it will not be let in while held
    gate.come_back(10)
    assert gate.reason(10) == "JobArrayTaskLimit"
    gate.ended(11, JobState.COMPLETED, 0, 2.0)
    assert gate.take(2.0) == ([10], [])
    gate.ended(10, JobState.COMPLETED, 0, 3.0)
    assert gate.take(3.0) == ([], [])  # 12 is still held
    gate.come_back(12)
    assert gate.take(3.0) == ([12], [])
