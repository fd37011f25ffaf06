"""A job's folder (`<jobs>/<id>/`): one layout for every executor, the files made before a start.

    <jobs>/<id>/output.log      the job's log (its owner's, 0600; `log_path`)
                launch.json     what its supervisor is told (`launch_file.py`)
                supervisor.pid  the supervisor's pid, status.json its end: the supervisor's
                stop_signal     a `cancel --signal`'s signal, written just before the SIGTERM
                steps/          its srun's record of each step (the job's user's, 0700:
                                `step_records.py`), read with its end
                attach.sock     an interactive job's terminal (`gpuyard attach`)
                script, checkpoints, progress   where the plan puts them (beside the log)

The folder stays the server's, so a job can never write its supervisor's files; what a job
could have written there all the same is read back with a size cap (`_read_small`).
`LocalExecutor` makes and reads all of it (on another machine of a Ray cluster, inside that
machine's agent, `adapters/agent/machine.py`).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import socket
import stat
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpuyard.adapters.executor.launch_file import STOP_SIGNAL_FILE, read_facts
from gpuyard.adapters.executor.status import parse_status
from gpuyard.adapters.executor.step_records import STEPS_ENV, make_steps_dir, read_steps
from gpuyard.domain.job import Job
from gpuyard.domain.output_paths import expand_output_path, job_folders
from gpuyard.services.ports import ExitStatus, LaunchPlan

log = logging.getLogger("gpuyard.executor")

LOG_FILE = "output.log"
STATUS_FILE = "status.json"
PID_FILE = "supervisor.pid"
ATTACH_SOCKET = "attach.sock"  # an interactive job's terminal (`gpuyard attach`)
# A session nobody attaches to by then (its `gpuyard run` was killed while it waited) ends
# without running, rather than hold its GPUs until its time limit.
ATTACH_TIMEOUT_S = 300.0


class JobFolder:
    """Where each job's files are under one jobs folder, and the folder's own steps."""

    __slots__ = ("_jobs_dir", "_jobs_dir_str")

    def __init__(self, jobs_dir: Path) -> None:
        self._jobs_dir = jobs_dir
        self._jobs_dir_str = str(jobs_dir)

    def job_dir(self, job_id: int) -> Path:
        return self._jobs_dir / str(job_id)

    def log_path(self, job_id: int) -> str:
        # A string join: every submit's answer names its log (Path joins cost 3% of a submit).
        return f"{self._jobs_dir_str}/{job_id}/{LOG_FILE}"

    def remove_files(self, job_id: int) -> None:
        """`gpuyard clean`: the folder of a finished job (a symlink in its place is refused by
        rmtree, and links inside are removed, not followed: the job wrote them)."""
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(self.job_dir(job_id))

    def prepare(self, jobdir: Path, plan: LaunchPlan) -> None:
        """The folder for a run: an earlier run's supervisor files gone, then the job's log,
        checkpoint folder, progress file and script (each step may be done again)."""
        jobdir.mkdir(parents=True, exist_ok=True)
        for stale in (STATUS_FILE, PID_FILE, STOP_SIGNAL_FILE):  # an earlier run's
            (jobdir / stale).unlink(missing_ok=True)
        give_to_owner(jobdir, plan)
        make_checkpoint_dir(plan)
        make_progress_file(plan)
        if STEPS_ENV in plan.env:  # its srun records its steps: this run's, from none
            who = plan.run_as
            make_steps_dir(
                jobdir, None if who is None else who.uid, None if who is None else who.gid
            )
        if plan.script is not None:
            write_script(plan)

    def ask_signal(self, job_id: int, stop_signal: int) -> None:
        """`cancel --signal`: the signal written whole to the job's folder, where its
        supervisor reads it on the SIGTERM that follows (a signal carries no value)."""
        path = self.job_dir(job_id) / STOP_SIGNAL_FILE
        tmp = path.with_name(f"{STOP_SIGNAL_FILE}.tmp")
        tmp.write_text(str(int(stop_signal)))
        tmp.replace(path)  # whole before the SIGTERM: never half a number

    def read_status(self, job: Job) -> ExitStatus | None:
        """The end the job's supervisor recorded, checked (`status.py`); None: none, or not a
        supervisor's."""
        text = _read_small(self.job_dir(job.id) / STATUS_FILE)
        if text is None:
            return None
        status = parse_status(text, job.started_at, time.time())
        if status is None:
            log.warning("job %s: its status.json is not a supervisor's; ignored", job.id)
            return None
        steps = read_steps(self.job_dir(job.id))
        return replace(status, steps=steps) if steps else status

    def read_pid_of_this_run(self, job: Job) -> int | None:
        """The supervisor's pid from the folder, if this run's launch got that far. The folder
        keeps the last run's supervisor.pid and status.json until the next launch removes
        them: a server killed after recording a start and before launching it finds them
        there, and they are not this run's (found by the chaos test: the job was ended with
        its last run's end instead of being run)."""
        run = read_facts(self.job_dir(job.id)).run
        if run is not None and run != job.restarts:
            return None
        return self.read_pid(job.id)

    def read_pid(self, job_id: int) -> int | None:
        text = _read_small(self.job_dir(job_id) / PID_FILE)
        try:
            return int(text) if text is not None and int(text) > 0 else None
        except ValueError:
            return None


def write_script(plan: LaunchPlan) -> None:
    """The script copied at submit, where the plan's argv runs it: owner-only (it may hold
    secrets), executable (a `#!` script is run by the kernel), the job's user's own."""
    assert plan.script is not None
    path, text = plan.script
    with contextlib.suppress(FileNotFoundError):  # an earlier run's, or whatever the job left
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o700)
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
        if plan.run_as is not None:
            os.fchown(f.fileno(), plan.run_as.uid, plan.run_as.gid)
        f.write(text)


def make_checkpoint_dir(plan: LaunchPlan) -> None:
    """GPUYARD_CHECKPOINT_DIR, made at the job's first launch and kept for every later run:
    the job's user's own, 0700 (on a root server the job's folder is 0711, so its owner
    reaches it by path). One already there is left as it is (it holds the last checkpoint);
    anything else in its place (a link the job planted) is refused, never followed."""
    if plan.checkpoint_dir is None:
        return
    try:
        os.mkdir(plan.checkpoint_dir, 0o700)
    except FileExistsError:
        if not stat.S_ISDIR(os.lstat(plan.checkpoint_dir).st_mode):
            raise NotADirectoryError(
                errno.ENOTDIR, "the job's checkpoint folder is not a folder", plan.checkpoint_dir
            ) from None
        return
    who = plan.run_as
    if who is not None and who.uid != os.geteuid():
        os.chown(plan.checkpoint_dir, who.uid, who.gid, follow_symlinks=False)


def make_progress_file(plan: LaunchPlan) -> None:
    """GPUYARD_PROGRESS_FILE, created before the job starts (appended to by all its runs): the
    job's user's own, 0600, in the server's folder, so the job can write it but never put a
    link in its place (the server reads it without following links all the same)."""
    if plan.progress_file is None:
        return
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(plan.progress_file, flags, 0o600)
    try:
        who = plan.run_as
        if who is not None and who.uid != os.geteuid():
            os.fchown(fd, who.uid, who.gid)
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


def give_to_owner(jobdir: Path, plan: LaunchPlan) -> None:
    """The job's log is its owner's own (0600), created before the supervisor appends to it.
    The folder stays the server's, so the job can never write its supervisor's files
    (`status.json`, `launch.json`, `supervisor.pid`); for a job run as another user it is 0711:
    its owner reaches its log and script by path, nobody lists it."""
    fd = os.open(plan.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        who = plan.run_as
        if who is not None and who.uid != os.geteuid():
            os.fchown(fd, who.uid, who.gid)
            os.fchmod(fd, 0o600)
            for folder in (jobdir, jobdir.parent):  # the job's folder, the jobs folder
                os.chmod(folder, 0o711)
    finally:
        os.close(fd)


def job_io(job: Job, plan: LaunchPlan, jobdir: Path) -> dict[str, Any]:
    """The launch file's I/O fields: sbatch's -o/-e expanded for this job on this machine, and
    an interactive job's pty and attach socket."""
    fields: dict[str, Any] = {}
    spec = job.spec
    if spec.output_path or spec.error_path:
        user = plan.run_as.user if plan.run_as is not None else _my_name()
        node = socket.gethostname()
        folders: list[str] = []
        for key, pattern in (("output_file", spec.output_path), ("error_file", spec.error_path)):
            if pattern:
                fields[key] = expand_output_path(pattern, job, user, node)
                folders += [f for f in job_folders(pattern, job, user, node) if f not in folders]
        if folders:
            fields["output_folders"] = folders
    if spec.kind == "interactive":
        fields.update(
            pty=True, attach_path=str(jobdir / ATTACH_SOCKET), attach_timeout_s=ATTACH_TIMEOUT_S
        )
    return fields


def _my_name() -> str:
    import pwd

    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def _read_small(path: Path, limit: int = 4096) -> str | None:
    """A file the job could have written: None if missing, unreadable or over `limit` bytes
    (a 10 GB status.json must not take the server's memory at a restart)."""
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
        return data.decode() if len(data) <= limit else None
    except (OSError, UnicodeDecodeError):
        return None
