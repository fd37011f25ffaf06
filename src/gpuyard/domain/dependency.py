"""Job dependencies in Slurm's `--dependency` syntax: what a job waits for, and whether it holds.

    afterok:12:13      after jobs 12 and 13 both COMPLETED (exit 0)
    afternotok:12      after job 12 ended in failure (FAILED, TIMEOUT, OUT_OF_MEMORY, ...)
    afterany:12        after job 12 ended, however
    after:12+5         5 minutes after job 12 started (or ended without starting)
    aftercorr:20       (an array's task i) after task i of array 20 COMPLETED
    singleton          one job of this owner and name at a time, in submit order
    afterok:12,singleton    `,`: every part must hold; `?`: any one part (not both in one)

An id names a job, or, when it is an array's id (its first task's), every task of the array;
`12_3` names task 3 of array 12. A dependency that can no longer hold (afterok on a job that
failed) is *never* satisfied: as Slurm's default, the live server's gate leaves the job pending,
reason DependencyNeverSatisfied, until its owner cancels it (`gpuyard simulate` ends it CANCELLED).
A job named that the server no longer knows (its record removed by `clean`) is taken as
satisfied, as Slurm lifts a dependency on a purged job.

Worked example: `afterok:12?afternotok:13`, job 12 FAILED, job 13 still running: the first
part is Never, the second Waiting, so the whole is Waiting; when 13 fails it is Satisfied.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpuyard.domain.errors import InvalidRequest

KINDS = ("after", "afterok", "afternotok", "afterany", "aftercorr")
SINGLETON = "singleton"
_MAX_REFS = 1_000


@dataclass(frozen=True, slots=True)
class Ref:
    """One job named: `job_id`, or task `task` of the array `job_id`; `delay_s`: after's +time."""

    job_id: int
    task: int | None = None
    delay_s: float = 0.0

    def __str__(self) -> str:
        return f"{self.job_id}" if self.task is None else f"{self.job_id}_{self.task}"


@dataclass(frozen=True, slots=True)
class Term:
    kind: str  # one of KINDS
    refs: tuple[Ref, ...]


@dataclass(frozen=True, slots=True)
class Dependency:
    """A parsed `--dependency`: `terms` all hold (or any one, `any_of`), plus `singleton`."""

    terms: tuple[Term, ...] = ()
    any_of: bool = False
    singleton: bool = False

    @property
    def empty(self) -> bool:
        return not self.terms and not self.singleton

    def refs(self, task: int | None = None) -> list[tuple[str, Ref]]:
        """(kind, the reference to look up) for every job named; an array task's aftercorr
        names the corresponding task of the other array (`task` is this job's index)."""
        return [
            (term.kind, resolve(term.kind, ref, task)) for term in self.terms for ref in term.refs
        ]


def resolve(kind: str, ref: Ref, task: int | None) -> Ref:
    if kind == "aftercorr" and ref.task is None and task is not None:
        return Ref(ref.job_id, task)
    return ref


@functools.lru_cache(maxsize=1024)
def parse_dependency(text: str) -> Dependency:
    """`text` in Slurm's syntax; raises InvalidRequest (field "dependency") saying what is wrong
    in one line. Cached: an array's 10,000 tasks carry one string."""
    body = text.strip()
    if not body:
        return Dependency()
    if "," in body and "?" in body:
        raise _bad(text, "use either `,` (all must hold) or `?` (any one), not both")
    any_of = "?" in body
    terms: list[Term] = []
    singleton = False
    for part in body.split("?" if any_of else ","):
        part = part.strip()
        if part == SINGLETON:
            singleton = True
            continue
        kind, colon, ids = part.partition(":")
        if kind not in KINDS:
            raise _bad(text, f"{part!r}: a part is {', '.join(KINDS)}:ID[:ID...] or singleton")
        if not colon or not ids:
            raise _bad(text, f"{part!r} names no job: {kind}:ID[:ID...]")
        refs = tuple(_ref(text, kind, item) for item in ids.split(":"))
        terms.append(Term(kind, refs))
    if sum(len(t.refs) for t in terms) > _MAX_REFS:
        raise _bad(text, f"more than {_MAX_REFS:,} jobs named")
    if any_of and singleton:
        raise _bad(text, "singleton joins other parts with `,`, not `?`")
    return Dependency(tuple(terms), any_of and len(terms) > 1, singleton)


def _ref(text: str, kind: str, item: str) -> Ref:
    ident, plus, minutes = item.partition("+")
    if plus and (kind != "after" or not minutes.isdigit()):
        raise _bad(text, f"{item!r}: only after takes +MINUTES (after:12+5)")
    job, underscore, task = ident.partition("_")
    if not job.isdigit() or int(job) < 1 or (underscore and not task.isdigit()):
        raise _bad(text, f"{item!r} is not a job id (12) or an array task (12_3)")
    return Ref(int(job), int(task) if underscore else None, 60.0 * int(minutes or 0))


def _bad(text: str, why: str) -> InvalidRequest:
    return InvalidRequest(
        f"--dependency {text[:80]!r}: {why} (e.g. afterok:12:13, afterany:12_3, singleton)",
        field="dependency",
    )


# -- evaluation --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tally:
    """What is known of the jobs one reference names: how many, how many ended (and of them
    COMPLETED with exit 0), how many began (started, or ended without starting) and when the
    last of them began. `total` 0: no such job (any more)."""

    total: int
    ended: int = 0
    ok: int = 0
    began: int = 0
    last_began_at: float = -math.inf


@dataclass(frozen=True, slots=True)
class Satisfied:
    pass


@dataclass(frozen=True, slots=True)
class Waiting:
    until: float | None = None  # it may hold at this time without any job changing (after+N)


@dataclass(frozen=True, slots=True)
class Never:
    why: str


Verdict = Satisfied | Waiting | Never
SATISFIED, WAITING = Satisfied(), Waiting()


def judge(kind: str, ref: Ref, tally: Tally, now: float) -> Verdict:
    """Whether one reference of one kind holds now."""
    if tally.total == 0:
        return SATISFIED  # a job no longer known: the dependency is lifted (Slurm's rule)
    if kind in ("afterok", "aftercorr"):
        if tally.ended > tally.ok:
            return Never(f"{kind}:{ref}: it ended without success")
        return SATISFIED if tally.ok == tally.total else WAITING
    if kind == "afternotok":
        if tally.ok:
            return Never(f"afternotok:{ref}: it completed successfully")
        return SATISFIED if tally.ended == tally.total else WAITING
    if kind == "afterany":
        return SATISFIED if tally.ended == tally.total else WAITING
    if tally.began < tally.total:  # after
        return WAITING
    at = tally.last_began_at + ref.delay_s
    return SATISFIED if at <= now else Waiting(at)


def evaluate(
    dep: Dependency, lookup: Callable[[Ref], Tally], now: float, task: int | None = None
) -> Verdict:
    """Whether `dep` holds now, given `lookup` (what is known of the jobs a reference names).
    `task`: the dependent's own array index (for aftercorr). Singleton is not judged here: it
    is a limit on running jobs, which the gate applies once the rest holds."""
    verdicts = [_term(term, lookup, now, task) for term in dep.terms]  # a term's ids must all hold
    if not verdicts:
        return SATISFIED
    if dep.any_of:
        if any(isinstance(v, Satisfied) for v in verdicts):
            return SATISFIED
        nevers = [v for v in verdicts if isinstance(v, Never)]
        if len(nevers) == len(verdicts):
            return Never("; ".join(v.why for v in nevers))
        return _soonest(verdicts)
    for v in verdicts:
        if isinstance(v, Never):
            return v
    if all(isinstance(v, Satisfied) for v in verdicts):
        return SATISFIED
    return _latest(verdicts)


def _term(term: Term, lookup: Callable[[Ref], Tally], now: float, task: int | None) -> Verdict:
    verdicts = []
    for ref in term.refs:
        resolved = resolve(term.kind, ref, task)
        verdict = judge(term.kind, resolved, lookup(resolved), now)
        if isinstance(verdict, Never):
            return verdict
        verdicts.append(verdict)
    if all(isinstance(v, Satisfied) for v in verdicts):
        return SATISFIED
    return _latest(verdicts)


def _soonest(verdicts: Sequence[Verdict]) -> Waiting:
    """Any one must hold: the soonest time one of the timed waits may hold (None if a wait
    needs an event)."""
    times = [v.until for v in verdicts if isinstance(v, Waiting) and v.until is not None]
    return Waiting(min(times)) if times else WAITING


def _latest(verdicts: Sequence[Verdict]) -> Waiting:
    """All must hold: the time only matters when every wait left is a timed one."""
    waits = [v for v in verdicts if isinstance(v, Waiting)]
    if any(v.until is None for v in waits):
        return WAITING
    return Waiting(max(v.until for v in waits if v.until is not None))
