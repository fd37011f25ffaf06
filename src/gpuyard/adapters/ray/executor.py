"""RayExecutor: the Executor port on a Ray cluster (`gpuyard server --backend ray`).

The scheduler has already chosen the machines and how many GPUs on each (`job.node` lists the
machines, `job.gpus` the GPUs, each GPU's machine known from the inventory); this adapter only
carries the decision out: one placement group pinned to those machines, one command per
machine (the plan's `argv_for`: torchrun with its node rank and rank 0's address), one log.
The job's end comes back through the same callback as a local job's, as an `ExitStatus`.

Worked example. Job 7, `--nodes 2 --gpus-per-node 2 --distributed torchrun`, placed on
gpuyard-local-0 (GPUs 0,1) and gpuyard-local-1 (GPUs 2,3): the gang is
`[(<node id of local-0>, 2, 1), (<node id of local-1>, 2, 1)]`; node 0 runs `torchrun
--nnodes=2 --node-rank=0 --master-addr=<its IP> ...`, node 1 the same with `--node-rank=1`; both
see `CUDA_VISIBLE_DEVICES=0,1` (Ray's indices on their machine). If node 1's raylet dies, the
job ends NODE_FAIL with "NodeLost: ..." and node 0's processes are stopped.

Ray chooses the physical GPUs of each bundle itself (`binds_devices = False`): the GPU indices
the scheduler chose are an account of how many GPUs each machine gives, not which ones.

Ray jobs do not outlive the server: the placement group and the node actors belong to the
server's Ray driver. A server restart finds them gone and ends such a job FAILED with that
reason (local jobs, under their own supervisors, are re-adopted instead).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from gpuyard.adapters.executor.job_folder import JobFolder
from gpuyard.adapters.executor.srun_shim import SRUN_WANTED
from gpuyard.adapters.ray import gang
from gpuyard.adapters.ray.cluster import RayConnection
from gpuyard.adapters.ray.gang import GangLaunchError
from gpuyard.adapters.ray.gang_handle import GangHandle, GangOutcome, GangResult
from gpuyard.domain.job import Job
from gpuyard.services.ports import (
    ExitCallback,
    ExitStatus,
    Launched,
    LaunchPlan,
    NodeLost,
    Recovered,
)

log = logging.getLogger("gpuyard.executor.ray")

LOST_WITH_SERVER = (
    "SupervisorLost: the job ran on the Ray cluster through the server that stopped; Ray jobs "
    "end with the server (resubmit it)"
)


class RayExecutor:
    """Implements the Executor port with Ray gang jobs."""

    binds_devices = False  # Ray picks each bundle's GPUs on its machine

    def __init__(
        self,
        connection: RayConnection,
        jobs_dir: Path,
        on_exit: ExitCallback,
        node_ids: Callable[[], dict[str, str]],
        *,
        grace_s: float = 10.0,
    ) -> None:
        self._conn = connection
        jobs_dir.mkdir(parents=True, exist_ok=True)
        self._folder = JobFolder(jobs_dir)
        self._on_exit = on_exit
        self._node_ids = node_ids  # gpuyard node name -> Ray node id (alive nodes)
        self._grace_s = grace_s
        self._handles: dict[int, GangHandle] = {}
        self._lock = threading.Lock()
        self._closing = False

    def job_dir(self, job_id: int) -> Path:
        return self._folder.job_dir(job_id)

    def remove_files(self, job_id: int) -> None:
        self._folder.remove_files(job_id)

    def log_path(self, job_id: int) -> str:
        return self._folder.log_path(job_id)

    def launch(self, job: Job, plan: LaunchPlan) -> Launched:
        """Start the job's gang, each node running the plan's command for its rank."""
        if plan.run_as is not None and plan.run_as.uid != os.getuid():
            # The server's own identity (what every Ray job runs as) is fine; another user's
            # would need the node's supervisor to drop privileges, not built for Ray yet.
            raise ValueError("running a job as another user is not supported on Ray yet")
        self.job_dir(job.id).mkdir(parents=True, exist_ok=True)
        ids = self._node_ids()
        names = job.node.split(",")
        missing = [name for name in names if name not in ids]
        if missing:
            raise NodeLost(f"Ray node {missing[0]} was lost before the job started")
        gpus_each = _split(len(job.gpus), len(names))
        cpus_each = max(1, math.ceil(job.spec.cpus / len(names)))
        per_node = [
            (ids[name], gpus, cpus_each) for name, gpus in zip(names, gpus_each, strict=True)
        ]
        argv = plan.argv
        argv_for = plan.argv_for or (lambda rank, addr, port: list(argv))
        # Each node writes gpuyard's `srun` itself (a machine of the cluster has no state dir).
        env = {**plan.env, SRUN_WANTED: "1"} if plan.srun_shim else plan.env
        try:
            handle = gang.launch(
                job.id, per_node, argv_for, env, plan.log_path, self._grace_s,
                plan.time_limit_s, workdir=plan.workdir, stop_signal=plan.stop_signal,
                warn=(plan.warn_signal, plan.warn_before_s),
            )  # fmt: skip
        except GangLaunchError as exc:
            alive = set(self._node_ids().values())
            if exc.node_id is not None and exc.node_id not in alive:
                raise NodeLost(f"a Ray node was lost while the job started: {exc}") from exc
            raise
        with self._lock:
            self._handles[job.id] = handle
        return Launched(pid=handle.nodes[0].worker_pid, started_at=time.time())

    def stop(self, job: Job, stop_signal: int | None = None) -> None:
        """A gang stops with its launch's signal (`submit --signal`): a cancel's own
        signal (`cancel --signal`) is not carried to the nodes' supervisors yet."""
        with self._lock:
            handle = self._handles.get(job.id)
        if handle is not None:
            handle.stop("stopped by gpuyard (cancel, preemption or a lost GPU)", wait=False)

    def recover(self, job: Job) -> Recovered:
        return Recovered(ended=ExitStatus(exit_code=None, lost=True, reason=LOST_WITH_SERVER))

    def watch(self, job: Job) -> None:
        with self._lock:
            handle = self._handles.get(job.id)
        if handle is None:
            return
        handle.add_done_callback(lambda result: self._ended(job.id, result))

    def _ended(self, job_id: int, result: GangResult) -> None:
        with self._lock:
            self._handles.pop(job_id, None)
        if self._closing and result.outcome is GangOutcome.CANCELLED:
            # Stopped because the server is: not a signal the job got from its user.
            status = ExitStatus(exit_code=None, lost=True, reason=LOST_WITH_SERVER)
        else:
            status = exit_status(result)
        self._on_exit(job_id, status)

    def close(self) -> None:
        """Ray jobs end with the server's Ray connection (closed by the server next): their
        ends are recorded as lost with the server, not as signals."""
        self._closing = True


def exit_status(result: GangResult) -> ExitStatus:
    """A gang job's end in the terms every executor reports."""
    now = time.time()
    outcome = result.outcome
    if outcome is GangOutcome.COMPLETED:
        return ExitStatus(exit_code=0, ended_at=now)
    if outcome is GangOutcome.TIMED_OUT:
        return ExitStatus(exit_code=None, timed_out=True, ended_at=now)
    if outcome is GangOutcome.CANCELLED:
        return ExitStatus(exit_code=None, signal=15, stop_requested=True, ended_at=now)
    if outcome is GangOutcome.NODE_LOST:
        return ExitStatus(
            exit_code=None, ended_at=now, node_lost=True,
            reason=f"NodeLost: {result.detail}; the job's other nodes were stopped",
        )  # fmt: skip
    code = result.exit_code
    if code is not None and code < 0:
        return ExitStatus(
            exit_code=None, signal=-code, ended_at=now, reason=f"NodeFailed: {result.detail}"
        )
    return ExitStatus(exit_code=code, ended_at=now, reason=f"NodeFailed: {result.detail}")


def _split(gpus: int, nodes: int) -> list[int]:
    """A job's GPUs over its nodes: evenly (the scheduler places `gpus // nodes` on each)."""
    each, rest = divmod(gpus, nodes)
    return [each + (1 if i < rest else 0) for i in range(nodes)]
