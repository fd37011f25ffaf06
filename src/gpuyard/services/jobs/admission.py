"""Every refusal a submission can meet, in the one order they are checked: the first that
fails is the error the user sees (a job, an array's tasks, a dry run, a restart alike).

    array       an array: one spec per task index, the indices all different
    gpus        no more GPUs than the server has
    gpu_type    --gpu-type: enough GPUs of that type (`domain/gpu_types.py`)
    gpu_mem     --gpu-mem: a server that shares GPUs and knows their memory; at most a GPU's
    container   --container: a runtime here that can run it (`launch/plan.py`)
    machines    --nodes: that many machines, each with its share of the GPUs
    cpus, mem   the CPUs and memory per machine
    owner       a root server: the owner has a Unix user it may run as (`launch/run_as.py`)
    quota       a limit that will never let it run, or the most jobs pending reached
    pending     an array: all its tasks within the most pending jobs allowed
    dependency  --dependency names jobs the submitter may see (`dependencies.py`)
    workdir     the working directory exists on the server, the `--venv`/`--python` and the
                program on the job's PATH too, looked at as the job's user (`launchable.py`)

`gpus` to `mem` are `check_fits` (also what `gpuyard update` asks of a new spec). The workdir
is looked at last, and by a submit on the event loop off it, once per burst from a directory.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

from gpuyard.domain.errors import InvalidRequest, QuotaExceeded
from gpuyard.domain.gpu_types import check_gpu_type
from gpuyard.domain.job import JobSpec
from gpuyard.domain.principal import Principal
from gpuyard.domain.states import JobState
from gpuyard.domain.units import format_size_mib
from gpuyard.scheduling.quotas import QuotaRules
from gpuyard.services.access.quotas import LimitService
from gpuyard.services.jobs.dependencies import check_dependency_of
from gpuyard.services.jobs.desk import JobDesk
from gpuyard.services.jobs.reads import JobReads
from gpuyard.services.launch.launchable import LaunchProbe, check_launchable, probe_of
from gpuyard.services.launch.plan import check_container
from gpuyard.services.launch.run_as import RunAsPolicy

# A working directory seen to exist this recently is not looked at again by a submit.
_SEEN_DIR_S = 5.0
_SEEN_DIRS = 1_000


@dataclass(frozen=True, slots=True)
class Submission:
    """What is being submitted: one job (`indices` None) or an array, task i with `specs[i]`."""

    specs: Sequence[JobSpec]
    actor: Principal
    indices: Sequence[int] | None = None

    def distinct(self) -> list[JobSpec]:
        """Each spec once (`--array` repeats one object; a sweep's trials differ)."""
        return list({id(spec): spec for spec in self.specs}.values())

    def workdirs(self) -> list[str]:
        return list(dict.fromkeys(spec.workdir for spec in self.specs))


class Admission:
    """Refuses at submit what could never run, or is not the submitter's to ask for."""

    def __init__(
        self,
        desk: JobDesk,
        reads: JobReads,
        *,
        limits: LimitService | None = None,
        identities: RunAsPolicy | None = None,
    ) -> None:
        self._desk = desk
        self._reads = reads  # the jobs a dependency names, as the submitter may see them
        self._limits = limits  # learns a submitter's team (None: a server without limits)
        self._identities = identities  # refuses an owner whose job could never run
        self._seen_dirs: dict[str, float] = {}  # workdir -> when it last existed (monotonic)
        self._seen_probes: dict[LaunchProbe, float] = {}  # -> when it last passed (monotonic)

    def admit(self, sub: Submission, *, defer_dirs: bool = False) -> list[LaunchProbe]:
        """Raise the first refusal, in the order above. `defer_dirs` (a submit on the event
        loop): a launch probe (workdir, interpreter, program) passed recently passes, and
        those to look at are returned for the caller to check off the loop (`check_launch`);
        else all are checked here."""
        distinct = sub.distinct()
        if sub.indices is not None:
            _check_array_size(sub.specs, sub.indices)
        for spec in distinct:
            self.check_fits(spec)
        if self._identities is not None:
            scripts = any(spec.script is not None for spec in distinct)
            self._identities.check(sub.actor.user, script=scripts)
        # The quotas look at a spec's GPUs and time limit only: each pair once.
        for spec in {(s.gpus, s.time_limit_s): s for s in distinct}.values():
            self._check_quota(spec, sub.actor)
        if sub.indices is not None:
            self._check_pending_room(len(sub.indices), sub.actor)
        check_dependency_of(self._reads, sub.specs[0], sub.actor)  # an array's tasks share one
        probes = self._probes(sub)
        unseen = [p for p in probes if not (defer_dirs and self._probed_recently(p))]
        if defer_dirs:
            return unseen
        for probe in unseen:
            self.check_launch(probe)
        return []

    def check_launch(self, probe: LaunchProbe) -> None:
        """The job's working directory, `--venv`/`--python` and program, looked at as the
        job's user (`launch/launchable.py`; may block on a stalled mount: a submit on the
        event loop calls this in a thread)."""
        server_uid = os.geteuid() if self._identities is None else self._identities.server_uid
        if probe.run_as is None or probe.run_as.uid == server_uid:
            self.check_workdir(probe.workdir)  # the server's own user: in its words
        check_launchable(probe, server_uid)
        self._seen_probes[probe] = time.monotonic()
        if len(self._seen_probes) > _SEEN_DIRS:
            self._seen_probes.clear()

    def _probes(self, sub: Submission) -> list[LaunchProbe]:
        """One probe per distinct thing to look at (a sweep's trials share theirs). Without
        identities (the tests' rigs, whose executors run nothing) only the workdirs."""
        if self._identities is None:
            return [LaunchProbe(w, None, None, "", "", None) for w in sub.workdirs()]
        run_as = None
        if self._identities is not None and self._identities.switches_users:
            run_as = self._identities.for_owner(sub.actor.user)  # refused above if none
        path = os.environ.get("PATH", "")
        return list(dict.fromkeys(probe_of(spec, run_as, path) for spec in sub.distinct()))

    def _probed_recently(self, probe: LaunchProbe) -> bool:
        """A burst of submits of one program from one directory looks once (a thread hop
        each would cost a fifth of a submit's CPU)."""
        seen = self._seen_probes.get(probe)
        return seen is not None and time.monotonic() - seen < _SEEN_DIR_S

    def check_workdir(self, workdir: str) -> None:
        """The working directory exists on the server (a stalled mount may block: a submit on
        the event loop calls this in a thread)."""
        if not os.path.isdir(workdir):
            problem = "is a file, not a folder" if os.path.exists(workdir) else "does not exist"
            raise InvalidRequest(
                f"workdir {workdir!r} {problem} on the server; create it or pass --workdir "
                "a folder",
                field="workdir",
            )
        self._seen_dirs[workdir] = time.monotonic()
        if len(self._seen_dirs) > _SEEN_DIRS:
            self._seen_dirs.clear()

    def _seen_recently(self, workdir: str) -> bool:
        """A burst of submits from one directory looks at the file system once (a thread hop
        each would cost a fifth of a submit's CPU)."""
        seen = self._seen_dirs.get(workdir)
        return seen is not None and time.monotonic() - seen < _SEEN_DIR_S

    def check_fits(self, spec: JobSpec) -> None:
        """Whether `spec` can ever run on this server (InvalidRequest naming what is short)."""
        inv = self._desk.inventory
        if spec.gpus > len(inv.gpus):
            raise InvalidRequest(
                f"the job asks for {_gpus(spec.gpus)} but this server has {_gpus(len(inv.gpus))} "
                f"({inv.source}); ask for fewer",
                field="gpus",
            )
        check_gpu_type(spec.gpu_type, spec.gpus, spec.nodes, inv.gpus)
        if spec.gpu_mem_mib:
            self._check_gpu_mem(spec)
        if spec.container is not None:
            check_container(spec, inv.container_runtime)
        self._check_machines(spec)
        # Per machine: a job on several has its CPUs and memory split over them.
        cpus, mem_mib = -(-spec.cpus // spec.nodes), -(-spec.mem_mib // spec.nodes)
        most_cpus = max(node.cpus for node in inv.nodes)
        most_mem = max(node.mem_mib for node in inv.nodes)
        each = " per machine" if spec.nodes > 1 else ""
        if cpus > most_cpus:
            raise InvalidRequest(
                f"the job asks for {cpus} CPUs{each} but this server offers {most_cpus}",
                field="cpus",
            )
        if mem_mib > most_mem:
            raise InvalidRequest(
                f"the job asks for {format_size_mib(mem_mib)} of memory{each} but this server "
                f"offers {format_size_mib(most_mem)}",
                field="mem",
            )

    def _check_machines(self, spec: JobSpec) -> None:
        """A job fits on one machine, or (`--nodes N`) on N machines with its share of GPUs."""
        inv = self._desk.inventory
        sizes = sorted((len(inv.gpus_of(node.name)) for node in inv.nodes), reverse=True)
        if spec.nodes > len(sizes):
            raise InvalidRequest(
                f"the job asks for {spec.nodes} nodes but this server has {len(sizes)} "
                "(multi-node jobs need `gpuyard server --backend ray` on a cluster)",
                field="nodes",
            )
        per_node = spec.gpus_per_node
        if sizes[spec.nodes - 1] < per_node:
            where = "one machine" if spec.nodes == 1 else f"{spec.nodes} machines"
            raise InvalidRequest(
                f"the job asks for {_gpus(per_node)} on {where}, but the largest machines here "
                f"have {', '.join(map(str, sizes[: spec.nodes]))} GPUs; ask for fewer"
                + (" or spread it with --nodes" if spec.nodes == 1 and len(sizes) > 1 else ""),
                field="gpus",
            )

    def _check_gpu_mem(self, spec: JobSpec) -> None:
        inv = self._desk.inventory
        if not inv.sharing:
            raise InvalidRequest(
                "--gpu-mem shares GPUs of one machine, but this server runs jobs on Ray, which "
                "gives each job whole GPUs: submit without --gpu-mem",
                field="gpu_mem",
            )
        per_gpu = inv.gpu_mem_mib()
        if per_gpu is None:
            raise InvalidRequest(
                "--gpu-mem shares GPUs by memory, but this server does not know its GPUs' memory "
                "(declared GPUs): start it with --gpu-mem-per-gpu SIZE, or submit without "
                "--gpu-mem for whole GPUs",
                field="gpu_mem",
            )
        if spec.gpu_mem_mib > per_gpu:
            raise InvalidRequest(
                f"--gpu-mem {format_size_mib(spec.gpu_mem_mib)} is more than a GPU here has "
                f"({format_size_mib(per_gpu)}); ask for at most that, or for whole GPUs without "
                "--gpu-mem",
                field="gpu_mem",
            )

    def _check_quota(self, spec: JobSpec, actor: Principal) -> None:
        """A job larger than a limit will ever let run, or one past the most jobs pending, is
        refused now in one line (`scheduling/quotas.py`); one over a running limit is queued
        and waits with the limit's reason. Costs nothing for users no limit applies to."""
        if self._limits is not None:
            self._limits.note_team(actor.user, actor.team)
        rules = self._desk.scheduler.quota_rules
        if not rules.limited(actor.user):
            return
        mine, theirs = self._pending_of(actor.user, rules.team_of.get(actor.user), rules)
        why = rules.submit_refusal(actor.user, spec.gpus, spec.time_limit_s, mine, theirs)
        if why is not None:
            raise QuotaExceeded(why)

    def _check_pending_room(self, count: int, actor: Principal) -> None:
        """Every task is a pending job: an array that would take its owner (or team) past the
        most pending jobs allowed is refused whole, in one line."""
        rules = self._desk.scheduler.quota_rules
        if not rules.limited(actor.user):
            return
        mine_limits, team, team_limits = rules.limits_of(actor.user)
        mine, theirs = self._pending_of(actor.user, team, rules)
        for who, lim, pending in ((f"user {actor.user}", mine_limits, mine),
                                  (f"team {team}", team_limits, theirs)):  # fmt: skip
            if (
                lim is not None
                and lim.max_pending is not None
                and pending + count > lim.max_pending
            ):
                raise QuotaExceeded(
                    f"the array's {count} tasks would give {who} {pending + count} pending "
                    f"jobs, the most allowed is {lim.max_pending}; submit fewer tasks or wait "
                    "for some jobs to start"
                )

    def _pending_of(self, user: str, team: str | None, rules: QuotaRules) -> tuple[int, int]:
        """The jobs pending now of `user`, and of their `team` (0 without one)."""
        team_of = rules.team_of
        mine = theirs = 0
        for job in self._desk.book.jobs(include_finished=False):
            if job.state is JobState.PENDING:
                mine += job.owner == user
                theirs += team is not None and team_of.get(job.owner) == team
        return mine, theirs


def _check_array_size(specs: Sequence[JobSpec], indices: Sequence[int]) -> None:
    if not indices or len(specs) != len(indices):
        raise InvalidRequest(
            f"an array needs one spec per task index ({len(specs)} specs, {len(indices)} indices)",
            field="array",
        )
    if len(set(indices)) != len(indices):
        raise InvalidRequest("an array's task indices must differ", field="array")


def _gpus(count: int) -> str:
    return f"{count} GPU" + ("" if count == 1 else "s")
