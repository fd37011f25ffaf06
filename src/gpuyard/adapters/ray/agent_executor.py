"""AgentExecutor: the Executor port over every machine's agent (`--backend ray`).

The scheduler has chosen the machines (`job.node`, comma-separated for `--nodes N`) and the
GPUs (`job.gpus`, the server's indices; each GPU's machine and device index are known from the
inventory). Each machine's part runs through that machine's agent (`agents.py`) exactly as a
one-box server runs a job: the agent's `LocalExecutor`, run-as, cgroups, the GPUs chosen (its
device indices, so `binds_devices`).

Rank r of a multi-node job logs to `node<r>.log` in its machine's job folder; the server's own
folder of the job (`<state>/jobs/<id>/`) holds the job's one log, which a mirror fills from
every rank's (`[node<r>] ` before each line) and, for a job on another machine, a copy of its
log and progress file as they grow (`mirror.py`); what each copy has read is kept beside it,
so a restarted server goes on where it stopped. The end comes from each machine's agent
(long-polled per machine, after a last mirror of its files); a multi-node job ends when every
rank has (the first rank to fail stops the others and gives the job its end).

A server restart: `recover` asks each machine's agent, which re-adopts the job from its own job
folder. An agent that comes back with a new incarnation (its worker died and Ray started it
again) has its machine's jobs re-adopted the same way. A machine lost (`machine_lost`, from
the node watch past Ray's grace) ends its jobs NODE_FAIL; when it is back (`machine_back`), its
agent first ends whatever of them still runs there (`fence`), then its GPUs are used again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from gpuyard.adapters.executor.job_folder import JobFolder
from gpuyard.adapters.ray.agents import AgentGone, AgentLink
from gpuyard.adapters.ray.mirror import Mirror
from gpuyard.adapters.ray.session_relay import SessionRelays
from gpuyard.domain.job import Gpu, Job
from gpuyard.services.ports import (
    ExitCallback,
    ExitStatus,
    Launched,
    LaunchPlan,
    NodeLost,
    Recovered,
)

log = logging.getLogger("gpuyard.executor.agents")

_POLL_S = 0.5  # how long one long poll of an agent's ends waits


@dataclass
class _Running:
    """A job of the cluster: the machine of each rank, and the ranks' ends so far."""

    job: Job
    machines: list[str]
    ends: dict[int, ExitStatus] = field(default_factory=dict)
    first_failure: ExitStatus | None = None
    watched: bool = False
    final: ExitStatus | None = None  # the job's end, once every rank has ended


class AgentExecutor:
    """Implements the Executor port with one machine agent per machine."""

    binds_devices = True  # each machine's agent gives the job exactly the GPUs chosen

    def __init__(
        self,
        links: Callable[[], dict[str, AgentLink]],
        jobs_dir: Path,
        on_exit: ExitCallback,
        gpus: Callable[[], Sequence[Gpu]],
        remake: Callable[[str], AgentLink | None] = lambda name: None,
        awaited: Sequence[str] = (),
    ) -> None:
        """`remake(name)`: a new agent for machine `name` whose agent died (None: its machine
        is not alive either; the node watch then says it is lost). `awaited`: machines away
        at the start, waited for: their jobs' ranks are taken as running until the machine is
        back (`machine_back` re-adopts them) or lost (`machine_lost` ends them)."""
        self._links = links  # machine name -> link, the machines alive now
        self._remake = remake
        self._awaited = set(awaited)
        jobs_dir.mkdir(parents=True, exist_ok=True)
        self._folder = JobFolder(jobs_dir)
        self._on_exit = on_exit
        self._gpus = gpus
        self._running: dict[int, _Running] = {}
        self._lock = threading.RLock()
        self._mirror = Mirror(self._folder)
        self._sessions = SessionRelays()  # terminals of sessions on other machines
        self._pollers: dict[str, threading.Thread] = {}
        self._incarnations: dict[str, str] = {}
        self._closed = threading.Event()

    # ---- the folder -------------------------------------------------------------------------

    def job_dir(self, job_id: int) -> Path:
        return self._folder.job_dir(job_id)

    def remove_files(self, job_id: int) -> None:
        self._folder.remove_files(job_id)
        for link in self._links().values():
            if not link.local:
                try:
                    link.call("remove_files", job_id)
                except AgentGone:
                    pass

    def log_path(self, job_id: int) -> str:
        return self._folder.log_path(job_id)

    # ---- start / stop -----------------------------------------------------------------------

    def launch(self, job: Job, plan: LaunchPlan) -> Launched:
        names = job.node.split(",")
        links = self._links()
        missing = [name for name in names if name not in links]
        if missing:
            raise NodeLost(f"machine {missing[0]} was lost before the job started")
        parts = self._rank_jobs(job, names)
        if len(names) == 1:
            plans = [replace(plan, argv_for=None)]
        else:
            plans = self._rank_plans(job, parts, plan, links[names[0]])
        run = _Running(job, names)
        with self._lock:
            self._running[job.id] = run
        self._mirror.start(job, names, [links[n].local for n in names], plan)
        started: list[tuple[int, Launched]] = []
        try:
            for rank, (name, part, rank_plan) in enumerate(zip(names, parts, plans, strict=True)):
                started.append((rank, links[name].call("launch", part, rank_plan)))
        except AgentGone as exc:
            self._undo(job, names[: len(started)])
            lost = names[len(started)]
            raise NodeLost(f"machine {lost} was lost while the job started: {exc}") from exc
        except BaseException:
            self._undo(job, names[: len(started)])
            raise
        self._relay_session(job, links[names[0]])
        return started[0][1]

    def _relay_session(self, job: Job, link: AgentLink) -> None:
        """An interactive session on another machine: its terminal reached from here."""
        if job.spec.kind == "interactive" and not link.local:
            name = link.name
            self._sessions.start(job.id, lambda: self._links().get(name), self.job_dir(job.id))

    def _undo(self, job: Job, names: list[str]) -> None:
        """A launch that failed part way: the ranks already started are stopped, forgotten."""
        with self._lock:
            self._running.pop(job.id, None)
        self._mirror.forget(job.id)
        for name in names:
            self._stop_on(name, job.id, None)

    def _rank_jobs(self, job: Job, names: list[str]) -> list[Job]:
        """`job` as each of its machines runs it: its GPUs there, by their device index."""
        by_index = {gpu.index: gpu for gpu in self._gpus()}
        n = len(names)
        spec = job.spec
        if n > 1:  # --mem and --cpus are the job's: each machine holds its share of them
            spec = replace(spec, mem_mib=-(-spec.mem_mib // n), cpus=max(1, -(-spec.cpus // n)))
        parts = []
        for name in names:
            here = [by_index[i] for i in job.gpus if i in by_index and by_index[i].node == name]
            local = tuple(g.index if g.device_index is None else g.device_index for g in here)
            parts.append(replace(job, spec=spec, gpus=local if n > 1 or here else job.gpus))
        return parts

    def _rank_plans(
        self, job: Job, parts: list[Job], plan: LaunchPlan, first: AgentLink
    ) -> list[LaunchPlan]:
        """Each rank's command (torchrun with its node rank, rank 0's address and a port free
        there), environment (its own GPUs) and log (`node<r>.log`)."""
        assert plan.argv_for is not None, "a multi-node plan has argv_for"
        names = job.node.split(",")
        port = int(first.call("free_port"))
        addr = first.ip
        folder = str(self.job_dir(job.id))
        plans = []
        for rank, part in enumerate(parts):
            mask = ",".join(str(i) for i in part.gpus)
            env = {
                **plan.env, "GPUYARD_NODE_RANK": str(rank), "GPUYARD_NUM_NODES": str(len(names)),
                "CUDA_VISIBLE_DEVICES": mask, "GPU_DEVICE_ORDINAL": mask,  # as Slurm's gres/gpu
            }  # fmt: skip
            plans.append(replace(
                plan, argv=tuple(plan.argv_for(rank, addr, port)), env=env, argv_for=None,
                log_path=f"{folder}/node{rank}.log",
            ))  # fmt: skip
        return plans

    def stop(self, job: Job, stop_signal: int | None = None) -> None:
        with self._lock:
            run = self._running.get(job.id)
        for rank, name in enumerate(run.machines if run is not None else job.node.split(",")):
            if run is None or rank not in run.ends:
                self._stop_on(name, job.id, stop_signal)

    def _stop_on(self, name: str, job_id: int, stop_signal: int | None) -> None:
        link = self._links().get(name)
        if link is None:
            return  # its machine is lost: its end comes from `machine_lost`
        try:
            link.call("stop", job_id, stop_signal)
        except AgentGone:
            log.warning("job %s: cannot reach %s to stop it", job_id, name)

    # ---- restart ----------------------------------------------------------------------------

    def recover(self, job: Job) -> Recovered:
        """Each of the job's machines re-adopts its rank from its own job folder."""
        names = job.node.split(",")
        links = self._links()
        run = _Running(job, names, watched=False)
        alive: Launched | None = None
        never = 0
        for rank, (name, part) in enumerate(zip(names, self._rank_jobs(job, names), strict=True)):
            link = links.get(name)
            if link is None and name in self._awaited:  # its machine may still run it
                found = Recovered(alive=Launched(job.pid or 0, job.started_at or 0.0))
            elif link is None:
                found = Recovered(ended=_lost(name))
            else:
                found = self._recover_on(link, part)
            if found.alive is not None:
                alive = alive or found.alive
            elif found.never_started:
                never += 1
                run.ends[rank] = ExitStatus(None, lost=True)
            else:
                assert found.ended is not None
                run.ends[rank] = found.ended
        if never == len(names):
            return Recovered(never_started=True)
        with self._lock:
            self._running[job.id] = run
        self._mirror.resume(job, names, [links[n].local if n in links else False for n in names])
        if alive is None:  # every rank has ended
            final = self._settle(run)
            with self._lock:
                self._running.pop(job.id, None)
            self._mirror.finish(job.id, self._links())
            return Recovered(ended=final)
        for rank in list(run.ends):
            self._after_rank_end(run, rank)
        if names[0] in links:
            self._relay_session(job, links[names[0]])
        return Recovered(alive=alive)

    def _recover_on(self, link: AgentLink, part: Job) -> Recovered:
        try:
            found: Recovered = link.call("recover", part)
            return found
        except AgentGone:
            return Recovered(ended=_lost(link.name))

    # ---- watching ---------------------------------------------------------------------------

    def watch(self, job: Job) -> None:
        with self._lock:
            run = self._running.get(job.id)
            if run is None:
                return
            run.watched = True
            final = run.final
        if final is not None:
            self._report(job.id, final)

    def start_polling(self, link: AgentLink) -> None:
        """Follow one machine's agent: its ends, its incarnation, the mirror of its files."""
        thread = threading.Thread(
            target=self._poll, args=(link,), name=f"gpuyard-agent-{link.name}", daemon=True
        )
        self._pollers[link.name] = thread
        thread.start()

    def _poll(self, link: AgentLink) -> None:
        while not self._closed.is_set() and self._links().get(link.name) is link:
            try:
                incarnation, ends = link.call("exits", _POLL_S, timeout_s=_POLL_S + 30)
            except AgentGone as exc:
                if exc.dead and self._replace(link):
                    return  # the new agent's poller goes on
                self._closed.wait(0.5)  # its machine is going (the watch says so) or busy
                continue
            link.last_heard = time.time()
            known = self._incarnations.get(link.name)
            self._incarnations[link.name] = incarnation
            if known is not None and known != incarnation:
                self._readopt(link)
            self._mirror.pass_once(link)
            for job_id, status in ends:
                self._rank_ended_on(link.name, job_id, status)

    def _replace(self, link: AgentLink) -> bool:
        """The agent of `link` died: a new one re-adopts the machine's jobs. False if none
        could be made (its machine is gone: the node watch ends its jobs)."""
        log.warning("the agent of %s died: starting a new one", link.name)
        try:
            new = self._remake(link.name)
        except Exception as exc:
            log.warning("cannot start a new agent on %s (%s)", link.name, exc)
            return False
        if new is None:
            return False
        self._incarnations[new.name] = str(new.hello.get("incarnation", ""))
        self._readopt(new)
        self.start_polling(new)
        return True

    def _readopt(self, link: AgentLink) -> None:
        """A new agent on this machine: it re-adopts the machine's jobs from their folders."""
        log.warning("the agent of %s started again: re-adopting its jobs", link.name)
        for run, rank in self._ranks_on(link.name):
            part = self._rank_jobs(run.job, run.machines)[rank]
            found = self._recover_on(link, part)
            if found.alive is None:
                self._rank_ended(run.job.id, rank, found.ended or ExitStatus(None, lost=True))

    def _ranks_on(self, name: str) -> list[tuple[_Running, int]]:
        """The ranks still running on machine `name`, with their jobs."""
        with self._lock:
            return [
                (run, rank) for run in self._running.values()
                for rank, machine in enumerate(run.machines)
                if machine == name and rank not in run.ends
            ]  # fmt: skip

    def _rank_ended_on(self, name: str, job_id: int, status: ExitStatus) -> None:
        with self._lock:
            run = self._running.get(job_id)
            ranks = [] if run is None else [r for r, n in enumerate(run.machines) if n == name]
        for rank in ranks:
            self._rank_ended(job_id, rank, status)

    def _rank_ended(self, job_id: int, rank: int, status: ExitStatus) -> None:
        with self._lock:
            run = self._running.get(job_id)
            if run is None or rank in run.ends:
                return
            run.ends[rank] = status
        self._after_rank_end(run, rank)

    def _after_rank_end(self, run: _Running, rank: int) -> None:
        status = run.ends[rank]
        if not _succeeded(status) and run.first_failure is None:
            run.first_failure = _as_failure(run, rank, status)
            for other, name in enumerate(run.machines):
                if other not in run.ends:
                    self._stop_on(name, run.job.id, None)
        if len(run.ends) < len(run.machines):
            return
        final = self._settle(run)
        self._mirror.finish(run.job.id, self._links())
        with self._lock:
            run.final = final
            watched = run.watched
        if watched:
            self._report(run.job.id, final)

    def _settle(self, run: _Running) -> ExitStatus:
        status = _used_by_all(self._settled(run), list(run.ends.values()))
        first = run.ends.get(0)  # node rank 0's srun records the steps (srun.sh)
        if first is not None and first.steps != status.steps:
            status = replace(status, steps=first.steps)
        return status

    def _settled(self, run: _Running) -> ExitStatus:
        if run.first_failure is not None:
            return run.first_failure
        first = run.ends[0] if 0 in run.ends else ExitStatus(None, lost=True)
        for status in run.ends.values():
            if not _succeeded(status):
                return _as_failure(run, list(run.ends.values()).index(status), status)
        return first

    def _report(self, job_id: int, status: ExitStatus) -> None:
        with self._lock:
            self._running.pop(job_id, None)
        self._sessions.stop(job_id)
        try:
            self._on_exit(job_id, status)
        except Exception:
            log.exception("recording the end of job %s failed", job_id)

    # ---- machines ---------------------------------------------------------------------------

    def machine_lost(self, name: str) -> None:
        """`name` is gone past the grace: every job with a rank there ends NODE_FAIL."""
        self._awaited.discard(name)
        for run, rank in self._ranks_on(name):
            self._rank_ended(run.job.id, rank, _lost(name))
        self._incarnations.pop(name, None)

    def machine_back(self, link: AgentLink) -> list[int]:
        """A machine is back (a new agent): the jobs the server no longer places there are
        ended before its GPUs are used again. Returns their ids."""
        with self._lock:
            keep = [run.job.id for run in self._running.values() if link.name in run.machines]
        ended: list[int] = link.call("fence", keep, timeout_s=120)
        if ended:
            log.warning("%s is back: ended job(s) %s still running there", link.name, ended)
        if link.name in self._awaited:  # away at the start, back within the grace
            self._awaited.discard(link.name)
            self._readopt(link)
        return ended

    def close(self) -> None:
        """Stop following the agents (their jobs run on: a restarted server re-adopts them)."""
        self._closed.set()
        for thread in self._pollers.values():
            thread.join(timeout=5)
        self._mirror.close()
        self._sessions.close()


def _used_by_all(status: ExitStatus, ends: list[ExitStatus]) -> ExitStatus:
    """The job's end with what all its ranks used (sacct's job figures): the largest resident
    set of any, the CPU time of all."""
    rss = [e.max_rss_kib for e in ends if e.max_rss_kib is not None]
    cpu = [e.cpu_time_s for e in ends if e.cpu_time_s is not None]
    if not rss and not cpu:
        return status
    return replace(
        status, max_rss_kib=max(rss) if rss else None, cpu_time_s=sum(cpu) if cpu else None
    )


def _succeeded(status: ExitStatus) -> bool:
    return (
        status.exit_code == 0 and not status.timed_out and not status.lost
        and not status.node_lost and not status.stop_requested
    )  # fmt: skip


def _as_failure(run: _Running, rank: int, status: ExitStatus) -> ExitStatus:
    """A rank's end as the job's: which node it was, for a multi-node job."""
    if len(run.machines) == 1 or status.reason or status.stop_requested or status.timed_out:
        return status
    name = run.machines[rank]
    if status.signal:
        how = f"was killed by signal {status.signal}"
    elif status.exit_code is not None:
        how = f"exited with code {status.exit_code}"
    else:
        how = "was lost"
    why = f"NodeFailed: node{rank} ({name}) {how}; the other nodes were stopped"
    return replace(status, reason=why)


def _lost(name: str) -> ExitStatus:
    return ExitStatus(
        None, ended_at=time.time(), node_lost=True,
        reason=f"NodeLost: machine {name} stopped answering; the job's other nodes were stopped",
    )  # fmt: skip
