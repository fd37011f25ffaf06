"""A LocalExecutor on a tmp dir, driven directly (no server), its ends collected: the rig of the
executor-level e2e tests (supervisor trust, fork server)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from gpuyard.adapters.executor.cgroups import JobCgroups
from gpuyard.adapters.executor.local import LocalExecutor
from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.states import JobState
from gpuyard.services.launch.plan import launch_plan
from gpuyard.services.ports import ExitStatus, RunAs

GRACE_S = 0.5
Env = dict[str, str]


class Rig:
    """A LocalExecutor on a tmp dir, its ends collected."""

    def __init__(self, tmp_path: Path, cgroups: JobCgroups | None = None) -> None:
        self.tmp = tmp_path
        self.cgroups = cgroups
        self.ended: dict[int, ExitStatus] = {}
        self.ended_when: dict[int, float] = {}
        self._cond = threading.Condition()
        self.executor = self.open()

    def open(self) -> LocalExecutor:
        """A LocalExecutor on the rig's folder (again: as a restarted server would)."""
        return LocalExecutor(
            self.tmp / "jobs", self._on_exit, grace_s=GRACE_S, guard_margin_s=1.0,
            cgroups=self.cgroups,
        )  # fmt: skip

    def _on_exit(self, job_id: int, status: ExitStatus) -> None:
        with self._cond:
            self.ended[job_id] = status
            self.ended_when[job_id] = time.monotonic()
            self._cond.notify_all()

    def start(
        self,
        job_id: int,
        script: str,
        *,
        limit_s: int | None = None,
        env: Env | None = None,
        run_as: RunAs | None = None,
        workdir: Path | None = None,
        gpus: tuple[int, ...] = (),
        **spec_fields: Any,
    ) -> Job:
        sent = {**(env or {}), "JOBDIR": str(self.executor.job_dir(job_id))}
        spec = JobSpec(
            argv=("sh", "-c", script), name="t", workdir=str(workdir or self.tmp),
            time_limit_s=limit_s, env=tuple(sent.items()), gpus=len(gpus), **spec_fields,
        )  # fmt: skip
        job = Job(job_id, spec, "me", JobState.PENDING, time.time())
        job = job.transition(JobState.RUNNING, started_at=time.time(), gpus=gpus)
        base = {"PATH": os.environ["PATH"]}
        plan = launch_plan(job, base, None, None, self.executor.log_path(job_id), run_as)
        launched = self.executor.launch(job, plan)
        job = job.with_changes(pid=launched.pid, pid_started_at=launched.started_at)
        self.executor.watch(job)
        return job

    def wait_end(self, job_id: int, timeout_s: float = 20) -> ExitStatus:
        with self._cond:
            assert self._cond.wait_for(lambda: job_id in self.ended, timeout_s), "no end reported"
            return self.ended[job_id]

    def log(self, job_id: int) -> str:
        return Path(self.executor.log_path(job_id)).read_text()
