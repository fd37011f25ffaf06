"""LocalExecutor: each job runs under its own supervisor process on this machine.

The server watches supervisors with pidfds (they work for processes that are not its
children, so also after a restart) and reads the exit status each supervisor writes, checked
(`status.py`): a job can write that file and kill its supervisor. A supervisor is a second
line, not the only one: when one is lost (killed, or stopped past its deadline), the job's
processes are found and ended here (`tree.py`) before the end is reported, so its GPUs are
never handed on while it still runs. Deadlines the executor keeps itself:

- the time limit: at `limit + grace + guard margin` after the supervisor started, a supervisor
  still there (a stopped one cannot act) is killed with its job, which ends TIMEOUT;
- a stop: `grace + guard margin` after `stop()` (which also sends SIGCONT), likewise.

Both are kept on the monotonic clock (a wall-clock step neither kills nor extends a job); the
time limit's counts from the supervisor's start as the kernel dated it (`_age_s`, boot-time
clock ticks), so it holds for a supervisor adopted after a server restart too.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import py_compile
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

import psutil

from gpuyard.adapters.disk_full import raise_if_disk_full
from gpuyard.adapters.executor import tree
from gpuyard.adapters.executor.cgroups import JobCgroups
from gpuyard.adapters.executor.forkserver import ForkServer
from gpuyard.adapters.executor.job_folder import JobFolder, job_io
from gpuyard.adapters.executor.launch_file import (
    LAUNCH_FILE,
    launch_instructions,
    new_marker,
    read_facts,
    write_launch_file,
)
from gpuyard.adapters.executor.srun_shim import prepare_srun, with_srun
from gpuyard.adapters.executor.step_records import STEPS_ENV, STEPS_FOLDER
from gpuyard.domain.job import Job
from gpuyard.domain.units import format_size_mib
from gpuyard.services.ports import ExitCallback, ExitStatus, Launched, LaunchPlan, Recovered

_T = TypeVar("_T")

log = logging.getLogger("gpuyard.executor")
SUPERVISOR = str(Path(__file__).with_name("supervisor.py"))
_SUPERVISOR_PARTS = ("pty", "serve")  # supervisor_<part>.py: loaded by the starts needing it
_START_TIME_TOLERANCE_S = 0.05
# The supervisor's whole environment: nothing of the server's or the job's (an LD_PRELOAD
# sent with a submit must never load into the supervisor); the job's comes from its plan.
_SUPERVISOR_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin"}
# Out of processes, descriptors or memory for a moment (a burst of connections, a fork
# storm): worth a few quick retries rather than failing the job.
_TRANSIENT = (errno.EMFILE, errno.ENFILE, errno.EAGAIN, errno.ENOMEM)
_LAUNCH_TRIES = 4
_LAUNCH_BACKOFF_S = 0.05
# How often the watch loop looks for a stopped supervisor (SIGSTOP, a debugger's stop): one
# stopped cannot reap its job, so the job would hold its GPUs past its processes' end.
_STOPPED_CHECK_S = 2.0


@dataclass
class _Watched:
    """A supervisor being watched, and the deadline past which the executor acts itself."""

    job: Job
    pidfd: int
    deadline: float | None = None  # time.monotonic(); None: none
    at_deadline: ExitStatus | None = None  # the end reported if the deadline forces it
    forced: ExitStatus | None = field(default=None)  # set once the executor killed it


@dataclass(frozen=True)
class _Forked:
    """A supervisor the fork server started (not our child: the fork server knows its exit)."""

    pid: int
    forks: ForkServer


class LocalExecutor:
    """Implements the Executor port with local supervised process trees."""

    binds_devices = True  # CUDA_VISIBLE_DEVICES is exactly the GPUs the scheduler chose

    def __init__(
        self,
        jobs_dir: Path,
        on_exit: ExitCallback,
        *,
        grace_s: float = 10.0,
        guard_margin_s: float = 5.0,
        cgroups: JobCgroups | None = None,
        job_log_max_mib: int = 0,
        user_log_max_mib: int = 0,
        disk_reserve_mib: int | None = None,
    ) -> None:
        """`cgroups`: each job held to its --mem, --cpus, a pids limit and its own GPUs
        (None, or none available: advisory). `job_log_max_mib`, `user_log_max_mib`: how
        large a job's log, and all of one user's jobs' logs, may grow (0: no budget);
        `disk_reserve_mib`: free space of the state disk no log takes (None: a twentieth of
        the disk, at most 256 MiB; none on a disk under 64 MiB)."""
        self._log_budget = (job_log_max_mib << 20, user_log_max_mib << 20)
        self._disk_reserve = (
            _default_reserve(jobs_dir) if disk_reserve_mib is None else disk_reserve_mib << 20
        )
        self._cgroups = cgroups if cgroups is not None and cgroups.available else None
        self._jobs_dir = jobs_dir
        self._jobs_dir.mkdir(parents=True, exist_ok=True)
        self._folder = JobFolder(jobs_dir)
        self._supervisor = _compile_supervisor(jobs_dir)
        self._srun_dir: str | None = None
        try:  # gpuyard's `srun` for the jobs that want one (`srun_shim.py`)
            self._srun_dir = prepare_srun(jobs_dir)
        except OSError as exc:
            log.warning("no srun for jobs: cannot write it in %s (%s)", jobs_dir, exc)
        self._on_exit = on_exit
        self._grace_s = grace_s
        self._margin_s = guard_margin_s
        self._children: dict[int, subprocess.Popen[bytes] | _Forked] = {}
        self._forks: ForkServer | None = None  # started at the first launch
        self._forks_lock = threading.Lock()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._pending_watch: list[_Watched] = []
        self._watched: dict[int, _Watched] = {}  # by job id; the watch thread's only
        self._stops: dict[int, float] = {}  # job id -> when stop() was asked
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._watch_loop, name="gpuyard-watch", daemon=True)
        self._thread.start()

    def job_dir(self, job_id: int) -> Path:
        return self._folder.job_dir(job_id)

    def remove_files(self, job_id: int) -> None:
        self._folder.remove_files(job_id)

    def log_path(self, job_id: int) -> str:
        return self._folder.log_path(job_id)

    # -- start / stop ---------------------------------------------------------------------
    def launch(self, job: Job, plan: LaunchPlan) -> Launched:
        jobdir = self.job_dir(job.id)
        if plan.srun_shim and self._srun_dir is not None:
            env = with_srun(plan.env, self._srun_dir)
            env[STEPS_ENV] = str(jobdir / STEPS_FOLDER)  # its srun's step records (sacct)
            plan = replace(plan, env=env)
        self._retrying(job.id, lambda: self._prepare(job, plan, jobdir))
        child = self._retrying(job.id, lambda: self._spawn(jobdir, plan.log_path))
        with self._lock:
            self._children[job.id] = child
        return Launched(child.pid, _start_time(child.pid) or 0.0)

    def _prepare(self, job: Job, plan: LaunchPlan, jobdir: Path) -> None:
        """The job's folder, log, checkpoint folder, script, cgroups and launch file (each
        step may be done again: a launch out of descriptors for a moment is retried whole)."""
        try:
            self._folder.prepare(jobdir, plan)
            groups: list[str] = []
            if self._cgroups is not None:
                uid = plan.run_as.uid if plan.run_as is not None else os.getuid()
                limits = self._cgroups.limits(job.spec.mem_mib, job.spec.cpus, job.gpus, uid=uid)
                groups = self._cgroups.create(job.id, limits)
            marker = new_marker()
            io = job_io(job, plan, jobdir)
            write_launch_file(
                jobdir,
                launch_instructions(
                    plan,
                    jobdir,
                    self._grace_s,
                    marker,
                    cgroups=groups,
                    **io,
                    log_room_bytes=self._log_room(plan),
                    disk_reserve_bytes=self._disk_reserve,
                    job_budget_bytes=self._log_budget[0],
                    user_budget_bytes=self._log_budget[1],
                    budget_uid=plan.run_as.uid if plan.run_as is not None else os.getuid(),
                ),
            )
        except OSError as exc:  # nothing started yet: a full disk is StateDiskFull (stays pending)
            if self._cgroups is not None:
                with contextlib.suppress(OSError):
                    self._cgroups.remove(job.id)
            raise_if_disk_full(exc, jobdir)
            raise

    def _log_room(self, plan: LaunchPlan) -> int:
        """What the job's log may still grow by (-1: no per-job budget): its budget less what
        its log (earlier runs') and checkpoint folder hold. The per-user budget, and this one
        again as the job writes, the supervisor holds (`supervisor._over_budget`: the user's
        other jobs, and this job's checkpoints, grow meanwhile), summing at its first write,
        so no launch pays for a walk of every job folder."""
        per_job = self._log_budget[0]
        if not per_job:
            return -1
        checkpoints = Path(plan.checkpoint_dir) if plan.checkpoint_dir is not None else None
        held = _size(plan.log_path) + (_tree_size(checkpoints) if checkpoints else 0)
        return max(0, per_job - held)

    def _retrying(self, job_id: int, step: Callable[[], _T]) -> _T:
        """`step`, tried again with a short back-off when it fails for a transient reason
        (EMFILE, ENFILE, EAGAIN, ENOMEM): a busy moment must not fail a job's launch."""
        for attempt in range(_LAUNCH_TRIES):
            try:
                return step()
            except OSError as exc:
                if exc.errno not in _TRANSIENT or attempt == _LAUNCH_TRIES - 1:
                    raise
                log.warning("job %s: launch failed (%s), retrying", job_id, exc.strerror)
                time.sleep(_LAUNCH_BACKOFF_S * 2**attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    def _spawn(self, jobdir: Path, log_path: str) -> subprocess.Popen[bytes] | _Forked:
        """A supervisor from the fork server (`forkserver.py`); one started on its own when
        no fork server can be started."""
        forks = self._fork_server()
        if forks is None:
            command = [sys.executable, "-I", "-S", self._supervisor, str(jobdir)]
            return self._start(command, log_path)
        return _Forked(forks.spawn(jobdir, log_path), forks)

    def _fork_server(self) -> ForkServer | None:
        with self._forks_lock:
            if self._forks is None or not self._forks.alive:
                if self._forks is not None:
                    self._forks.close()
                try:
                    self._forks = ForkServer(self._supervisor, self._jobs_dir, _SUPERVISOR_ENV)
                except OSError as exc:
                    log.warning("no supervisor fork server (%s): starting each on its own", exc)
                    self._forks = None
            return self._forks

    def _start(self, command: list[str], log_path: str) -> subprocess.Popen[bytes]:
        # The log is the supervisor's stdout from the first instruction, so even a supervisor
        # that cannot read its launch file says why somewhere the user looks.
        with open(log_path, "ab") as logf:
            return subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                env=_SUPERVISOR_ENV,
                start_new_session=True,  # its session id is its pid: how its tree is found
                close_fds=True,
            )

    def stop(self, job: Job, stop_signal: int | None = None) -> None:
        """SIGTERM (and SIGCONT: a supervisor its job stopped must still hear it); if the
        supervisor has not ended `grace + margin` later, the watch loop ends it and the job.
        `stop_signal` (`cancel --signal`): what the job's processes get instead of the
        launch's; written to the job's folder first, where the supervisor reads it on SIGTERM
        (a signal carries no value the supervisor could read)."""
        if job.pid is None or not self._is_ours(job.pid, job.pid_started_at, job.id):
            return
        with self._lock:
            self._stops.setdefault(job.id, time.monotonic())
        if stop_signal is not None:
            try:
                self._folder.ask_signal(job.id, stop_signal)  # whole before the SIGTERM below
            except OSError as exc:
                log.warning("job %s: cannot ask for signal %s (%s)", job.id, stop_signal, exc)
        for sig in (signal.SIGCONT, signal.SIGTERM):
            try:
                os.kill(job.pid, sig)
            except ProcessLookupError:
                return
        os.write(self._wake_w, b"x")  # the watch loop arms the stop's deadline

    # -- restart --------------------------------------------------------------------------
    def recover(self, job: Job) -> Recovered:
        pid = job.pid or self._folder.read_pid_of_this_run(job)
        if pid is None:
            return Recovered(never_started=True)
        started_at = job.pid_started_at if job.pid == pid else None
        if self._folder.read_status(job) is None and self._is_ours(pid, started_at, job.id):
            return Recovered(alive=Launched(pid, _start_time(pid) or 0.0))
        # Ended, or its supervisor is gone. Anything of the job still running means the
        # supervisor did not finish its work (a real status is written only once the whole
        # tree is gone): that status is not the supervisor's, the job was lost.
        if self._end_leftovers(job, pid, started_at):
            return Recovered(ended=self._release(job, ExitStatus(None, lost=True)))
        ended = self._folder.read_status(job) or ExitStatus(None, lost=True)
        return Recovered(ended=self._release(job, ended))

    def _is_ours(self, pid: int, started_at: float | None, job_id: int) -> bool:
        return is_supervisor(pid, started_at, str(self.job_dir(job_id)))

    # -- watching -------------------------------------------------------------------------
    def watch(self, job: Job) -> None:
        assert job.pid is not None
        try:
            pidfd = os.pidfd_open(job.pid)
        except ProcessLookupError:
            self._report(_Watched(job, -1))
            return
        watched = _Watched(job, pidfd)
        limit = job.spec.time_limit_s
        if limit:
            age = _age_s(job.pid)
            if age is None:  # gone meanwhile (its pidfd tells), or /proc unreadable: wall clock
                age = max(0.0, time.time() - (job.pid_started_at or job.started_at or time.time()))
            left = limit + self._grace_s + self._margin_s - age
            watched.deadline = time.monotonic() + left
            watched.at_deadline = ExitStatus(None, timed_out=True)
        with self._lock:
            self._pending_watch.append(watched)
        os.write(self._wake_w, b"x")

    def _watch_loop(self) -> None:
        checked_at = time.monotonic()
        while not self._closed:
            if time.monotonic() - checked_at >= _STOPPED_CHECK_S:
                checked_at = time.monotonic()
                self._continue_stopped()
            for key, _ in self._selector.select(timeout=self._next_deadline_in()):
                if key.data is None:
                    os.read(self._wake_r, 4096)
                    self._take_new()
                    continue
                watched: _Watched = key.data
                self._selector.unregister(key.fileobj)
                self._watched.pop(watched.job.id, None)
                self._report(watched)
            self._enforce_deadlines()

    def _take_new(self) -> None:
        with self._lock:
            added, self._pending_watch = self._pending_watch, []
            stops = dict(self._stops)
        for watched in added:
            self._selector.register(watched.pidfd, selectors.EVENT_READ, watched)
            self._watched[watched.job.id] = watched
        for job_id, asked in stops.items():
            found = self._watched.get(job_id)
            if found is not None and found.forced is None:
                end = asked + self._grace_s + self._margin_s
                if found.deadline is None or end < found.deadline:
                    found.deadline = end
                    found.at_deadline = ExitStatus(None, signal=15, stop_requested=True)

    def _next_deadline_in(self) -> float:
        deadlines = [w.deadline for w in self._watched.values() if w.deadline and not w.forced]
        now = time.monotonic()
        return max(0.0, min([1.0, *(d - now for d in deadlines)]))

    def _continue_stopped(self) -> None:
        """A supervisor found stopped whose job's processes are all gone is continued: stopped,
        it cannot see its job end, so the job would hold its GPUs and its end go unrecorded.
        One stopped while its job runs is left to the executor's deadlines (time limit, stop),
        as before; the job's own processes are never touched here."""
        for watched in list(self._watched.values()):
            pid = watched.job.pid
            if watched.forced is not None or pid is None:
                continue
            if not _stopped_after_its_job(pid):
                continue
            log.warning("job %s: its supervisor (pid %s) was stopped after its job ended; "
                        "continuing it", watched.job.id, pid)  # fmt: skip
            try:
                signal.pidfd_send_signal(watched.pidfd, signal.SIGCONT)
            except OSError:
                pass

    def _enforce_deadlines(self) -> None:
        """A supervisor past its deadline cannot act (stopped, stuck): kill it; its job's
        processes are ended once its pidfd reports it gone (`_report`)."""
        now = time.monotonic()
        for watched in self._watched.values():
            if watched.forced or watched.deadline is None or now < watched.deadline:
                continue
            watched.forced = watched.at_deadline
            log.warning("job %s: its supervisor missed its deadline; ending it", watched.job.id)
            try:
                signal.pidfd_send_signal(watched.pidfd, signal.SIGKILL)
            except OSError:
                pass

    def _report(self, watched: _Watched) -> None:
        """A supervisor is gone: report its job's end, at once when its status is the
        supervisor's; else (off the watch thread: it takes the grace period) only after the
        job's processes are found and ended."""
        job = watched.job
        with self._lock:
            child = self._children.pop(job.id, None)
            self._stops.pop(job.id, None)
        code = _exit_code(child)
        if watched.pidfd >= 0:
            os.close(watched.pidfd)
        # A supervisor that did not exit 0 did not finish: whatever status.json says was not
        # written by it (or not at its end), so it is not believed.
        finished = code is None or code == 0
        status = self._folder.read_status(job) if finished and not watched.forced else None
        if status is not None and code is not None:
            self._tell(job, status)
            return
        # Lost, forced, or an adopted supervisor (not our child, its exit code out of reach:
        # processes of the job still running are what give a forged status away).
        threading.Thread(
            target=self._settle, args=(job, status, watched.forced), daemon=True
        ).start()

    def _settle(self, job: Job, status: ExitStatus | None, forced: ExitStatus | None) -> None:
        assert job.pid is not None
        if self._end_leftovers(job, job.pid, job.pid_started_at):
            status = None
        self._tell(job, status or forced or ExitStatus(None, lost=True))

    def _tell(self, job: Job, status: ExitStatus) -> None:
        try:
            self._on_exit(job.id, self._release(job, status))
        except Exception:
            log.exception("recording the end of job %s failed", job.id)

    def _release(self, job: Job, status: ExitStatus) -> ExitStatus:
        """The job's processes are gone: its cgroups go too, after reading whether the
        kernel killed it at its --mem (a host-RAM OOM, which no exit code tells)."""
        if self._cgroups is None:
            return status
        try:
            cause = self._cgroups.oom_cause(job.id)
            self._cgroups.remove(job.id)
        except OSError as exc:
            log.warning("job %s: cannot release its cgroups (%s)", job.id, exc)
            return status
        if not cause or status.stop_requested or status.timed_out or status.exit_code == 0:
            return status
        return replace(status, out_of_memory=True, reason=_oom_reason(job, cause, self._cgroups))

    def _end_leftovers(self, job: Job, pid: int, started_at: float | None) -> bool:
        """End whatever of the job still runs after its supervisor `pid` (`tree.py`); True
        if anything did."""
        since = started_at or job.started_at or 0.0
        facts = read_facts(self.job_dir(job.id))
        ours = self._is_ours(pid, started_at, job.id)
        # The session is the supervisor's only while its id cannot have been reused: the
        # supervisor is there (or a zombie), or gone (members of its session still hold the id).
        session = pid if ours or not running(pid) else -1
        found = tree.find_job_processes(session, facts.marker, since, facts.uid)
        if not found:
            return False
        log.warning("job %s: ending %d process(es) its supervisor left", job.id, len(found))
        if ours:  # alive but useless (stopped): it goes too
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        tree.end_processes(found, facts.stop_signal, self._grace_s)
        return True

    def close(self) -> None:
        self._closed = True
        os.write(self._wake_w, b"x")
        self._thread.join(timeout=5)
        with self._forks_lock:
            if self._forks is not None:
                self._forks.close()  # the supervisors it forked run on
        if self._cgroups is not None:
            self._cgroups.close()


def _size(path: str | Path, uid: int | None = None) -> int:
    """A file's size (0: none; or not `uid`'s, when given)."""
    try:
        found = os.stat(path, follow_symlinks=False)
    except OSError:
        return 0
    return found.st_size if uid is None or found.st_uid == uid else 0


def _tree_size(folder: Path) -> int:
    """What the files under `folder` hold (links not followed)."""
    return sum(
        _size(os.path.join(root, name)) for root, _, files in os.walk(folder) for name in files
    )


def _default_reserve(jobs_dir: Path) -> int:
    """A twentieth of the state disk, at most 256 MiB, kept from logs; none on a disk under
    64 MiB (a test's tmpfs)."""
    try:
        disk = os.statvfs(jobs_dir)
    except OSError:
        return 0
    size = disk.f_blocks * disk.f_frsize
    return 0 if size < 64 << 20 else min(size // 20, 256 << 20)


def _oom_reason(job: Job, cause: str, cgroups: JobCgroups) -> str:
    """Why the kernel killed the job for host RAM, naming whose limit was reached: the job's
    own --mem (its to raise), or, the job within it, all jobs' or the machine's (not its)."""
    asked = format_size_mib(job.spec.mem_mib) if job.spec.mem_mib else "(none)"
    if cause == "own":
        return (
            f"OutOfMemory: the job used all its --mem {asked} of host RAM and the kernel killed "
            "it (not GPU memory); ask for more --mem"
        )
    if cause == "jobs" and cgroups.jobs_mem_mib:
        given = format_size_mib(cgroups.jobs_mem_mib)
        whose = f"all jobs together reached the {given} of host RAM this server gives jobs"
    else:
        whose = "the machine (or the server's own cgroup) ran out of host RAM"
    return (
        f"OutOfMemory: the kernel killed the job for memory while it was within its --mem "
        f"{asked}: {whose}; not this job's limit: submit it again"
    )


def _exit_code(child: subprocess.Popen[bytes] | _Forked | None) -> int | None:
    """An ended supervisor's exit code; None when out of reach (adopted after a restart, or
    its fork server gone). Our own child is reaped here, so no zombie is left."""
    if child is None:
        return None
    if isinstance(child, _Forked):
        return child.forks.exit_code(child.pid)
    return child.wait()


def _compile_supervisor(jobs_dir: Path) -> str:
    """The supervisor as bytecode (saves compiling it at every job start, ~2 ms), its parts
    beside it in the jobs folder, where it finds them (`supervisor._part`); if any of them
    cannot be compiled, all run from source."""
    source = Path(SUPERVISOR)
    try:
        for part in _SUPERVISOR_PARTS:
            part_source = source.with_name(f"supervisor_{part}.py")
            part_target = jobs_dir / f".supervisor_{part}.pyc"
            py_compile.compile(str(part_source), cfile=str(part_target), doraise=True)
        target = jobs_dir / ".supervisor.pyc"
        py_compile.compile(SUPERVISOR, cfile=str(target), doraise=True)
        return str(target)
    except (OSError, py_compile.PyCompileError):
        return SUPERVISOR


def is_supervisor(pid: int, started_at: float | None, jobdir: str) -> bool:
    """`pid` is the supervisor of the job in `jobdir`: same pid, and the same start time or
    that supervisor's command line or folder (a reused pid never passes)."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        if started_at and abs(proc.create_time() - started_at) < _START_TIME_TOLERANCE_S:
            return True
        # Start time unknown, or moved: psutil dates a start from the kernel's boot time in
        # wall-clock terms, which a step of the wall clock moves by the step. Then: started
        # on its own, its command line names its folder; forked by the fork server, its
        # working directory is its folder (no other process's is).
        return jobdir in proc.cmdline() or proc.cwd() == jobdir
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def running(pid: int) -> bool:
    """A process with this pid exists and is not a zombie."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True  # there, but not ours to look at


def _stopped_after_its_job(pid: int) -> bool:
    """Whether supervisor `pid` is stopped (SIGSTOP, a debugger) while no process under it
    (it is its job's subreaper) is alive: its job ended and it cannot see it."""
    try:
        proc = psutil.Process(pid)
        if proc.status() not in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP):
            return False
        children = proc.children(recursive=True)
    except psutil.Error:
        return False  # gone, or unreadable: its pidfd, or a deadline, ends it
    for child in children:
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            continue
        except psutil.Error:
            return False
    return True


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _age_s(pid: int) -> float | None:
    """How long process `pid` has existed, on the boot-time clock (monotonic, suspend
    included; no wall-clock step moves it): its start in clock ticks since boot (field 22 of
    /proc/PID/stat) against CLOCK_BOOTTIME. None when unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat_line = f.read()
        ticks = int(stat_line[stat_line.rindex(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None
    return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / _CLOCK_TICKS)


def _start_time(pid: int) -> float | None:
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.NoSuchProcess:
        return None


__all__ = ["LAUNCH_FILE", "LocalExecutor"]
