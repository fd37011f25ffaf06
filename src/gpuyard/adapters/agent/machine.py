"""MachineAgent: everything one machine does for the server, in one object.

What a machine does on a one-box server (launch under the supervisor through the fork server,
run-as, per-job cgroups, the exact GPUs, the job folder; GPU detection and telemetry) is the
`LocalExecutor` and the GPU adapters; the agent holds them for its machine and answers in
plain, picklable values, so the same object serves in the server's process (the server's own
machine) and as a detached Ray actor on every other machine (`adapters/ray/agents.py`).

- Its jobs outlive it: their supervisors are not its children's children it waits on but
  processes of their own sessions, watched by pidfd; an agent started again (after its worker
  died, its raylet came back, or the server restarted) re-adopts them from its job folders when
  the server asks (`recover`), exactly as a restarted one-box server does.
- The server's paths are translated: the server plans a job in its own jobs folder (`server
  jobs`); on this machine the job's folder is under the agent's root (`GPUYARD_AGENT_DIR` on the
  machine, else the root the server proposed). Every path of a plan under the server's folder
  is moved under the agent's (`localized`); nothing else is touched.
- Ends are queued (`exits`, long-polled by the server) as well as written to the job's folder
  (status.json, by the supervisor): an end the server missed while it was away is read from
  the folder at `recover`.
- `fence(keep)`: every job whose supervisor still runs here but that the server no longer
  places here is ended before the server uses this machine's GPUs again (slurmd's rule for a
  node that comes back).
- `doctor_facts`: `gpuyard doctor --node`'s facts of this machine, gathered here.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import secrets
import signal
import socket
import threading
import time
from collections import deque
from dataclasses import replace
from importlib import metadata
from pathlib import Path
from typing import Any

from gpuyard.adapters.agent.doctoring import gather_doctor_facts
from gpuyard.adapters.executor import tree
from gpuyard.adapters.executor.cgroups import JobCgroups, gpu_device_numbers
from gpuyard.adapters.executor.job_folder import ATTACH_SOCKET, PID_FILE, STATUS_FILE
from gpuyard.adapters.executor.launch_file import LAUNCH_FILE, read_facts
from gpuyard.adapters.executor.local import LocalExecutor, is_supervisor, running
from gpuyard.adapters.gpus.processes import PsutilProcessOwners
from gpuyard.adapters.gpus.select import NoGpuDriver, choose_gpus
from gpuyard.adapters.gpus.telemetry import open_gpu_telemetry
from gpuyard.domain.job import Gpu, Job
from gpuyard.services.ports import (
    ExitStatus,
    GpuReading,
    GpuTelemetrySource,
    Launched,
    LaunchPlan,
    Recovered,
)

log = logging.getLogger("gpuyard.agent")

AGENT_DIR_VAR = "GPUYARD_AGENT_DIR"  # where this machine keeps its job folders (its admin's)
# The files of a job folder the server may read back (its log mirror, progress).
READABLE = re.compile(r"output\.log|progress\.jsonl|node[0-9]+\.log")
_READ_LIMIT = 1 << 20  # at most this much of one file per read
_FENCE_MARGIN_S = 5.0


def _none_detected() -> list[Gpu]:
    raise NoGpuDriver("no GPU detected: the GPUs Ray declares for this machine")


def _make_folders(path: Path) -> None:
    """`path` and the parents it lacks, each 0711: a job run as its owner must reach its own
    folder below them (it cannot list them), whatever the agent's umask."""
    missing = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o711)
        os.chmod(folder, 0o711)


def _ray_node_id() -> str:
    """The Ray node this agent runs on ("" in the server's own process without Ray)."""
    try:
        import ray

        return str(ray.get_runtime_context().get_node_id()) if ray.is_initialized() else ""
    except Exception:
        return ""


def agent_version() -> str:
    try:
        return metadata.version("gpuyard")
    except metadata.PackageNotFoundError:  # run from a source tree
        return "unknown"


_SESSION_CHUNK = 1 << 16  # what one `session_io` hands back at most


class MachineAgent:
    """One machine's launcher, job folders and GPUs. Every method is safe to call from
    several threads (a Ray actor with `max_concurrency`)."""

    def __init__(
        self,
        name: str,
        root: str,
        server_jobs: str,
        *,
        grace_s: float = 10.0,
        gpus: str = "auto",
        declared_gpus: int = 0,
        declared_gpu_mem_mib: int | None = None,
        job_cgroups: bool = True,
        pids_max: int | None = 16384,
    ) -> None:
        """`root`: the agent's folder on this machine unless its admin set GPUYARD_AGENT_DIR;
        `server_jobs`: the server's jobs folder, which plans name; `gpus`: `--gpus` for this
        machine (auto: detected); `declared_gpus`: how many to declare when none is detected
        (what Ray says the machine has)."""
        self.name = name
        self.incarnation = secrets.token_hex(8)  # a new agent: the server re-adopts its jobs
        self._root = Path(os.environ.get(AGENT_DIR_VAR) or root)
        self._server_jobs = server_jobs.rstrip("/")
        self._jobs = self._root / "jobs"
        _make_folders(self._jobs)
        found, self.gpu_source = choose_gpus(gpus, declared_mem_mib=declared_gpu_mem_mib)
        if not found and declared_gpus:
            found, self.gpu_source = choose_gpus(
                str(declared_gpus), detect=_none_detected, declared_mem_mib=declared_gpu_mem_mib
            )
        self.gpus: list[Gpu] = found
        cgroups = None
        if job_cgroups:
            scope = hashlib.sha256(str(self._jobs.resolve()).encode()).hexdigest()[:12]
            cgroups = JobCgroups(
                scope, pids_max=pids_max, all_gpus=tuple(g.index for g in found),
                gpu_devices=gpu_device_numbers(found),
            )  # fmt: skip
        self.confinement = (
            cgroups.describe() if cgroups is not None and cgroups.available
            else "none: --mem, --cpus and GPU devices are advisory on this machine"
        )  # fmt: skip
        self._lock = threading.Condition()
        self._ends: deque[tuple[int, ExitStatus]] = deque()
        self._jobs_here: dict[int, Job] = {}  # the jobs this agent launched or re-adopted
        self._executor = LocalExecutor(self._jobs, self._ended, grace_s=grace_s, cgroups=cgroups)
        self._grace_s = grace_s
        self._telemetry: GpuTelemetrySource | None = None
        self._telemetry_lock = threading.Lock()
        self._sessions: dict[str, socket.socket] = {}  # relayed terminals, by key

    # ---- who this is ----------------------------------------------------------------------

    def hello(self) -> dict[str, Any]:
        """What the server needs to know of this machine (at every (re)connection)."""
        import psutil

        return {
            "name": self.name,
            "incarnation": self.incarnation,
            "version": agent_version(),
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "gpus": list(self.gpus),
            "gpu_source": self.gpu_source,
            "cpus": os.cpu_count() or 1,
            "mem_mib": psutil.virtual_memory().total >> 20,
            "confinement": self.confinement,
            "jobs_dir": str(self._jobs),
            "ray_node_id": _ray_node_id(),
        }

    # ---- jobs ------------------------------------------------------------------------------

    def launch(self, job: Job, plan: LaunchPlan) -> Launched:
        """Start `job` here (its `gpus` are this machine's device indices)."""
        launched = self._executor.launch(job, self.localized(plan))
        mine = replace(job, pid=launched.pid, pid_started_at=launched.started_at)
        with self._lock:
            self._jobs_here[job.id] = mine
        self._executor.watch(mine)
        return launched

    def recover(self, job: Job) -> Recovered:
        """What became of `job` here (after the server or this agent restarted); a job still
        running is watched again, its end queued when it comes."""
        local = replace(job, pid=None, pid_started_at=None)
        found = self._executor.recover(local)
        if found.alive is not None:
            mine = replace(job, pid=found.alive.pid, pid_started_at=found.alive.started_at)
            with self._lock:
                if job.id in self._jobs_here:  # already watched by this agent
                    return found
                self._jobs_here[job.id] = mine
            self._executor.watch(mine)
        return found

    def stop(self, job_id: int, stop_signal: int | None = None) -> bool:
        """Stop a job of this machine; False when it is not (or no longer) here."""
        with self._lock:
            job = self._jobs_here.get(job_id)
        if job is None:
            return False
        self._executor.stop(job, stop_signal)
        return True

    def exits(self, wait_s: float) -> tuple[str, list[tuple[int, ExitStatus]]]:
        """(this agent's incarnation, the ends since the last call), waiting up to `wait_s`
        for one."""
        deadline = time.monotonic() + wait_s
        with self._lock:
            while not self._ends and (left := deadline - time.monotonic()) > 0:
                self._lock.wait(left)
            ends = list(self._ends)
            self._ends.clear()
        return self.incarnation, ends

    def _ended(self, job_id: int, status: ExitStatus) -> None:
        with self._lock:
            self._jobs_here.pop(job_id, None)
            self._ends.append((job_id, status))
            self._lock.notify_all()

    def read_files(
        self, wanted: list[tuple[int, str, int]]
    ) -> list[tuple[int, str, int, bytes | None]]:
        """`(job_id, file, offset)` -> the file's bytes from `offset` (at most 1 MiB each;
        None: no such file). Only a job folder's log and progress file may be read."""
        out = []
        for job_id, name, offset in wanted:
            data: bytes | None = None
            if READABLE.fullmatch(name):
                path = self._jobs / str(job_id) / name
                with contextlib.suppress(OSError):
                    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
                    try:
                        data = os.pread(fd, _READ_LIMIT, offset)
                    finally:
                        os.close(fd)
            out.append((job_id, name, offset, data))
        return out

    def remove_files(self, job_id: int) -> None:
        self._executor.remove_files(job_id)

    def fence(self, keep: list[int]) -> list[int]:
        """End every job that still runs here but is not in `keep` (the jobs the server places
        on this machine now); returns the ids ended. Blocks until they are gone."""
        ended = []
        for folder in sorted(self._jobs.iterdir()) if self._jobs.exists() else []:
            if not folder.name.isdigit() or int(folder.name) in keep:
                continue
            if (folder / STATUS_FILE).exists() or not (folder / PID_FILE).exists():
                continue
            if self._end_stale(int(folder.name), folder):
                ended.append(int(folder.name))
        return ended

    def _end_stale(self, job_id: int, folder: Path) -> bool:
        """End what still runs of the job of `folder` (its supervisor first, so it stops its
        tree as it would at a cancel; then anything left). A supervisor pid that now names
        another process is never signalled, nor its session searched (as `LocalExecutor`
        does after a restart)."""
        try:
            pid = int((folder / PID_FILE).read_text().strip())
            since = (folder / LAUNCH_FILE).stat().st_mtime - 5.0  # the launch was written
        except (OSError, ValueError):
            return False
        facts = read_facts(folder)
        ours = is_supervisor(pid, None, str(folder))
        session = pid if ours or not running(pid) else -1
        found = tree.find_job_processes(session, facts.marker, since, facts.uid)
        if not found and not ours:
            return False
        log.warning("job %s: ending it here, the server no longer places it on %s", job_id,
                    self.name)  # fmt: skip
        if ours:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + self._grace_s + _FENCE_MARGIN_S
            while time.monotonic() < deadline and is_supervisor(pid, None, str(folder)):
                time.sleep(0.1)
            if is_supervisor(pid, None, str(folder)):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        tree.end_processes(found, facts.stop_signal, self._grace_s)  # closes the pidfds
        left = tree.find_job_processes(session, facts.marker, since, facts.uid)
        tree.end_processes(left, signal.SIGKILL, 0)
        with self._lock:
            self._jobs_here.pop(job_id, None)
        return True

    # ---- GPUs ------------------------------------------------------------------------------

    def read_gpus(
        self, indices: list[int], processes: bool, attribute: bool = False
    ) -> list[GpuReading]:
        """This machine's GPUs' telemetry, by device index (opened at the first call).
        `attribute`: each compute process is given the job it runs under here (the server
        cannot look another machine's pids up): what `--gpu-mem`, OOM diagnosis and the
        per-job GPU memory figures need on every machine."""
        with self._telemetry_lock:
            if self._telemetry is None:
                self._telemetry = open_gpu_telemetry(self.gpus)
            readings = self._telemetry.read(indices, processes=processes)
        if not (processes and attribute):
            return readings
        with self._lock:
            supervisors = {j.pid: (j.id, j.pid_started_at)
                           for j in self._jobs_here.values() if j.pid is not None}  # fmt: skip
        pids = {p.pid for r in readings for p in r.processes or ()}
        owners = PsutilProcessOwners().owners(pids, supervisors) if pids else {}
        return [
            r if r.processes is None else replace(r, processes=tuple(
                replace(p, job_id=owners.get(p.pid), attributed=True) for p in r.processes
            ))
            for r in readings
        ]  # fmt: skip

    # ---- interactive sessions (relayed by the server, `adapters/ray/session_relay.py`) ----

    def session_owner(self, job_id: int) -> tuple[int, int] | None:
        """(uid, gid) of a session's terminal socket here, once its supervisor made it."""
        try:
            st = os.stat(self._jobs / str(job_id) / ATTACH_SOCKET)
        except FileNotFoundError:
            return None
        return st.st_uid, st.st_gid

    def session_open(self, job_id: int) -> str | None:
        """Connect to a session's terminal here (as root: its supervisor lets root in); a key
        for `session_io`, None if it has no terminal (any more)."""
        folder = os.open(self._jobs / str(job_id), os.O_PATH | os.O_DIRECTORY)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(f"/proc/self/fd/{folder}/{ATTACH_SOCKET}")
        except OSError:
            sock.close()
            return None
        finally:
            os.close(folder)
        key = secrets.token_hex(8)
        with self._lock:
            self._sessions[key] = sock
        return key

    def session_io(self, key: str, data: bytes, wait_s: float) -> tuple[bytes, bool]:
        """Send `data` to the terminal, then what it has for the client (waiting up to
        `wait_s` for something); True once the terminal has closed."""
        import select

        with self._lock:
            sock = self._sessions.get(key)
        if sock is None:
            return b"", True
        try:
            if data:
                sock.sendall(data)
            out = bytearray()
            ready, _, _ = select.select([sock], [], [], wait_s)
            while ready and len(out) < _SESSION_CHUNK:
                got = sock.recv(_SESSION_CHUNK)
                if not got:
                    self.session_close(key)
                    return bytes(out), True
                out += got
                ready, _, _ = select.select([sock], [], [], 0)
            return bytes(out), False
        except OSError:
            self.session_close(key)
            return b"", True

    def session_close(self, key: str) -> None:
        with self._lock:
            sock = self._sessions.pop(key, None)
        if sock is not None:
            sock.close()

    def probe(self, port: int, path: str, timeout_s: float) -> str | None:
        """A service's health check, on this machine's loopback (where it listens): None if
        it answered, else why not."""
        from gpuyard.adapters.service_probe import probe

        return probe("127.0.0.1", port, path, timeout_s)

    def doctor_facts(self) -> dict[str, Any]:
        """`gpuyard doctor`'s facts of this machine (its driver, ROCm, python3's frameworks,
        the disk of the agent's folder, its job limits), as the doctor model's JSON."""
        return gather_doctor_facts(self._root, self.confinement)

    def free_port(self) -> int:
        """A TCP port free on this machine right now (a multi-node job's rendezvous)."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("", 0))
            return int(sock.getsockname()[1])

    # ---- paths -----------------------------------------------------------------------------

    def localized(self, plan: LaunchPlan) -> LaunchPlan:
        """`plan` with every path under the server's jobs folder moved under this agent's."""
        if str(self._jobs) == self._server_jobs:
            return plan
        move = self._local_path
        return replace(
            plan,
            argv=tuple(move(a) for a in plan.argv),
            env={k: move(v) for k, v in plan.env.items()},
            workdir=move(plan.workdir),
            log_path=move(plan.log_path),
            script=None if plan.script is None else (move(plan.script[0]), plan.script[1]),
            argv_for=None,
            checkpoint_dir=None if plan.checkpoint_dir is None else move(plan.checkpoint_dir),
            progress_file=None if plan.progress_file is None else move(plan.progress_file),
        )

    def _local_path(self, text: str) -> str:
        prefix = self._server_jobs + "/"
        return str(self._jobs) + "/" + text[len(prefix) :] if text.startswith(prefix) else text

    def close(self) -> None:
        """Stop watching (the jobs run on under their supervisors)."""
        self._executor.close()
        with self._telemetry_lock:
            if self._telemetry is not None:
                self._telemetry.close()
                self._telemetry = None
