"""Ports: what the services need from the outside world, as Protocols adapters implement (the
stores besides the job store: `stores.py`)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol

from gpuyard.domain.job import Drain, Job, JobStep
from gpuyard.domain.states import JobState


class JobStore(Protocol):
    """Durable job records. `write` returns only once the rows are on disk.

    Implementations: `adapters/store/sql.py` (SQLite, PostgreSQL by URL) and
    `adapters/store/memory.py`; `tests/contract/` runs one suite over all of them."""

    def lock_exclusive(self) -> None:
        """Claim the database for this server until `close()`: a second server on it would run
        every job twice. Raises Unavailable("another gpuyard server already uses <db>; ...")."""
        ...

    def load_active(self, recent_finished: int) -> list[Job]:
        """What the server keeps in memory, by id: every pending and running job, and the
        `recent_finished` finished jobs that ended last."""
        ...

    def get_job(self, job_id: int) -> Job | None:
        """One job, whether or not the server still keeps it in memory."""
        ...

    def max_job_id(self) -> int:
        """The highest job id ever given, 0 for none: new ids start above it."""
        ...

    def page_jobs(
        self,
        *,
        limit: int,
        before_id: int | None = None,
        since: float | None = None,
        states: Collection[JobState] | None = None,
        owner: str | None = None,
        name: str | None = None,
    ) -> list[Job]:
        """Up to `limit` jobs newest first by id, with id < `before_id` (keyset pagination:
        the next page passes the last id of this one), submitted at or after `since`, in one of
        `states`, of `owner`, named `name` (None: no filter)."""
        ...

    def load_jobs(self) -> list[Job]:
        """Every job ever, by id: for tests and tools only (the server uses `load_active`)."""
        ...

    def find_by_idempotency_key(self, owner: str, key: str) -> Job | None:
        """The job `owner` submitted with this `Idempotency-Key` (the lowest id if, against
        the service's rule, there were several); None: none. Another owner's key never
        matches. Asked for a key the server no longer keeps in memory (a finished job)."""
        ...

    def array_tasks(self, array_job_id: int) -> list[Job]:
        """An array's tasks (the jobs whose `array_job_id` is this), by task index; [] for no
        such array. Asked for an array some of whose tasks the server no longer keeps."""
        ...

    def delete_finished(
        self, *, ended_before: float | None = None, owner: str | None = None
    ) -> list[int]:
        """`gpuyard clean`: delete finished jobs (and their GPU stats) that ended before
        `ended_before`, of `owner` (None: anyone's), durably, in one transaction; a pending or
        running job never, whatever is asked. Their ids are never given again (`max_job_id`
        still counts them). Returns the deleted ids, ascending."""
        ...

    def write(self, inserts: Sequence[Job], updates: Sequence[Job]) -> None:
        """Insert new jobs and update existing ones (compare-and-set on `version - 1`),
        durably, in one transaction. Raises Conflict if an update lost a race."""
        ...

    def write_future(self, inserts: Sequence[Job], updates: Sequence[Job]) -> Future[None]:
        """`write` without blocking: the Future completes once the rows are on disk."""
        ...

    def load_drains(self) -> dict[str, Drain]:
        """GPUs out of service, by GPU UUID ("index:N" for drains recorded before UUIDs)."""
        ...

    def save_drain(self, gpu_uuid: str, drain: Drain | None) -> None:
        """Record a drain (None: the GPU is back in service), durably."""
        ...

    def load_gpu_stats(self, limit: int) -> dict[int, dict[str, Any]]:
        """The last `limit` finished jobs' GPU stats, by job id."""
        ...

    def save_gpu_stats(self, job_id: int, stats: dict[str, Any]) -> None:
        """A finished job's GPU stats, durably."""
        ...

    def close(self) -> None:
        """Flush pending writes and release the database (and the lock)."""
        ...


class LiveJobs(Protocol):
    """The in-memory book's reads (`jobs/book.py` `JobBook`), for the rooms below `jobs/` that
    watch live jobs (a service's port and health check) without importing the jobs room."""

    def get(self, job_id: int) -> Job | None: ...

    def jobs(self, *, include_finished: bool) -> list[Job]: ...

    def running(self) -> list[Job]: ...


@dataclass(frozen=True, slots=True)
class PostResult:
    """How one webhook POST went: `status` the HTTP status (None: no answer), `error` why it
    failed (""), `final` when trying again cannot help (a refused host)."""

    status: int | None
    error: str = ""
    final: bool = False

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


class WebhookPoster(Protocol):
    """POSTs a body to a URL (`adapters/webhook.py`): no redirect followed, a timeout, the
    host checked against the server's allow-list at connection time."""

    def post(self, url: str, headers: Mapping[str, str], body: bytes) -> PostResult: ...


@dataclass(frozen=True, slots=True)
class ExitStatus:
    """How a job's process ended, as its supervisor recorded it."""

    exit_code: int | None
    signal: int | None = None
    timed_out: bool = False
    ended_at: float | None = None
    lost: bool = False  # the supervisor vanished without recording anything
    stop_requested: bool = False  # it was told to stop (cancel, preemption) before it ended
    # What the executor knows better than an exit code (which node failed); with `node_lost`
    # the job's machine was lost (it ends NODE_FAIL with this reason).
    reason: str | None = None
    node_lost: bool = False
    # The kernel killed a process of the job at its --mem (its cgroup's OOM killer): it ends
    # OUT_OF_MEMORY for host RAM, with `reason`.
    out_of_memory: bool = False
    # Bytes of the job's output its log lost because the log's disk was full (the job ran on).
    log_dropped_bytes: int = 0
    # What the job's processes used (the supervisor's rusage of every one it reaped): the
    # largest resident set, KiB, and user + system CPU seconds; None: not known.
    max_rss_kib: int | None = None
    cpu_time_s: float | None = None
    # The `srun` steps the job ran, as its srun recorded them (node rank 0's on many nodes).
    steps: tuple[JobStep, ...] = ()


@dataclass(frozen=True, slots=True)
class Launched:
    """Identity of a job's supervisor process: pid plus start time, so a reused pid never
    passes for ours."""

    pid: int
    started_at: float


@dataclass(frozen=True, slots=True)
class Recovered:
    """What a restarted server finds for a job it believed RUNNING."""

    alive: Launched | None = None
    ended: ExitStatus | None = None
    never_started: bool = False


class NodeLost(RuntimeError):
    """A machine the job was placed on is gone (raised by `Executor.launch`): the job ends
    NODE_FAIL, not FAILED."""


@dataclass(frozen=True, slots=True)
class RunAs:
    """The Unix identity a job's processes take (the supervisor drops to it before `chdir` and
    `exec`); None in a plan: the server's own user."""

    user: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str
    shell: str = "/bin/sh"
    # The job's file-creation mask: 077 for a user's job on a shared server (nobody else reads
    # what it writes); the server's own mask from before it closed its own (077) when the
    # job runs as the server's user, so a single-user box behaves as before.
    umask: int = 0o077


class IdentityResolver(Protocol):
    """Which Unix user a job owner's processes run as (`adapters/identity.py`: the owner's
    name is the Unix user's, today; accounts may map a name to another Unix user)."""

    def __call__(self, owner: str) -> RunAs | None:
        """The owner's Unix identity (uid, gid, every group, home, shell); None: no such user."""
        ...


@dataclass(frozen=True, slots=True)
class MachineStatus:
    """What the server knows of one machine's agent: answering, its gpuyard version, when it
    last answered (time.time())."""

    alive: bool
    version: str
    last_heard: float | None


class MachineDirectory(Protocol):
    """The machines' agents (`adapters/ray/machines.py`; on one box, the server itself)."""

    def statuses(self) -> dict[str, MachineStatus]: ...


class MachineNotAnswering(Exception):
    """A machine's agent did not answer (lost, or not in time); the message says why."""


class MachineDoctor(Protocol):
    """Each machine's `gpuyard doctor` facts, gathered on that machine by its agent
    (`adapters/agent/doctoring.py`; on Ray, `adapters/ray/machine_doctor.py`) as the doctor
    model's JSON (`doctor/wire.py`), judged by the CLI as it judges its own machine's."""

    def doctor_facts(self, name: str) -> dict[str, Any] | None:
        """None: no machine of that name; raises MachineNotAnswering."""
        ...


@dataclass(frozen=True, slots=True)
class ContainerRuntime:
    """A container runtime on the server's machine: `kind` apptainer, singularity or podman,
    `path` its executable."""

    kind: str
    path: str


@dataclass(frozen=True, slots=True)
class LaunchPlan:
    """Everything an executor needs to start one job, decided by the services: the command
    (one machine: `argv`; node `rank` of a multi-node job: `argv_for(rank, master_addr,
    master_port)`), the job's environment (applied to the job only, never to the supervisor),
    where it runs and logs, as whom, and how it is stopped."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    workdir: str
    log_path: str
    time_limit_s: int | None = None
    argv_for: Callable[[int, str, int], list[str]] | None = None
    run_as: RunAs | None = None
    stop_signal: int = 15  # SIGTERM, then SIGKILL after the grace period
    # (path in the job's folder, text): the script copied at submit, which `argv` runs; the
    # executor writes it (owner-only, executable) before the job starts.
    script: tuple[str, str] | None = None
    # `--signal SIG@SECONDS`: `warn_signal` to the job's processes `warn_before_s` before its
    # time limit, once (0: none); `warn_target` which (JobSpec.warn_target: "all", "steps":
    # all but the batch shell, "batch": the batch shell alone).
    warn_signal: int = 0
    warn_before_s: int = 0
    warn_target: str = "all"
    # GPUYARD_CHECKPOINT_DIR: the job's folder for checkpoints, kept across its runs; the
    # executor makes it (the job's user's, 0700) when it is missing. None: none.
    checkpoint_dir: str | None = None
    # GPUYARD_PROGRESS_FILE: where `gpuyard.progress()` appends (the job's folder); the executor
    # creates it, the job's user's, 0600, before the job starts. None: none.
    progress_file: str | None = None
    # gpuyard's `srun` on the job's PATH (`launch.wants_srun`): the executor appends the
    # folder where it wrote it, unless a real Slurm's `srun` is on the server's PATH.
    srun_shim: bool = False


class Executor(Protocol):
    """Runs jobs in supervised process trees and reports when they end."""

    # True when the job runs on exactly the physical GPUs the scheduler chose (local
    # supervisors); False when the backend picks devices itself (Ray), so a drain of a single
    # GPU cannot be enforced there and must be refused or mapped.
    binds_devices: bool

    def launch(self, job: Job, plan: LaunchPlan) -> Launched:
        """Start the job's supervisor following `plan`; returns once the process exists.
        Transient failures (out of descriptors, processes or memory) are retried inside.
        Raises NodeLost if a machine the job was placed on is gone."""
        ...

    def stop(self, job: Job, stop_signal: int | None = None) -> None:
        """Ask the job's supervisor to stop the whole tree (stop signal, grace, KILL); if it
        cannot act (its job keeps it stopped), the executor ends it and the tree itself.
        `stop_signal`: this stop's signal (`cancel --signal`); None: the launch plan's."""
        ...

    def recover(self, job: Job) -> Recovered:
        """Re-find a job after a server restart: still running, ended, or never started."""
        ...

    def watch(self, job: Job) -> None:
        """Report the job's end through the callback given at construction, only once its
        processes are gone: a lost supervisor's job is found and ended first, and a job
        past its time limit (plus grace and a margin) whose supervisor cannot act is ended
        TIMEOUT by the executor."""
        ...

    def log_path(self, job_id: int) -> str: ...

    def remove_files(self, job_id: int) -> None:
        """Delete a finished job's folder (log, launch file, status): `gpuyard clean`. Never
        called for a pending or running job; a folder already gone is no error. Raises OSError
        when the folder cannot be removed."""
        ...

    def close(self) -> None: ...


ExitCallback = Callable[[int, ExitStatus], None]


@dataclass(frozen=True, slots=True)
class GpuProcessReading:
    """One compute process NVML lists on a GPU; memory None where the driver won't say.
    `attributed`: the machine that runs it said whose it is (`job_id`, None: no job's), as
    another machine of a cluster does: its pids are its own, not the server's to look up."""

    pid: int
    memory_used_mib: int | None
    job_id: int | None = None
    attributed: bool = False


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU's telemetry at one instant. None means n/a: the driver lacks the function,
    the GPU doesn't support it, or the call failed (`error` says why when the GPU is gone)."""

    index: int
    util_pct: int | None = None
    memory_util_pct: int | None = None
    memory_used_mib: int | None = None
    memory_total_mib: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: int | None = None
    throttle_reasons: tuple[str, ...] | None = None
    ecc_corrected: int | None = None
    ecc_uncorrected: int | None = None
    xid_events: int | None = None  # critical XID events seen since the server started
    last_xid: int | None = None
    # None: not listed this time (processes are sampled less often) or n/a.
    processes: tuple[GpuProcessReading, ...] | None = None
    error: str | None = None
    # dcgm-exporter's other default counters (issue 24), each None where n/a
    mem_clock_mhz: int | None = None
    memory_temp_c: int | None = None
    memory_reserved_mib: int | None = None  # the driver's own, apart from used and free
    enc_util_pct: int | None = None
    dec_util_pct: int | None = None
    energy_mj: int | None = None  # total since the driver loaded (a counter)
    pcie_tx_kib: int | None = None  # totals since boot (counters)
    pcie_rx_kib: int | None = None
    pcie_replays: int | None = None
    nvlink_kib: int | None = None  # all links, both ways, since boot
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    row_remap_failed: bool | None = None
    tensor_active_pct: float | None = None  # GPM (Hopper on): between the last two samples
    gr_engine_active_pct: float | None = None
    dram_active_pct: float | None = None
    driver_version: str | None = None


class GpuTelemetrySource(Protocol):
    """Reads live GPU telemetry (NVML). Called from one thread only; never raises for a
    missing or failing metric (that metric is None)."""

    def read(self, indices: Sequence[int], *, processes: bool) -> list[GpuReading]:
        """One reading per GPU index; `processes`: also list each GPU's compute processes."""
        ...

    def close(self) -> None: ...


class ProcessOwners(Protocol):
    """Which job a process belongs to: the process trees under the jobs' supervisors."""

    def owners(
        self, pids: Collection[int], supervisors: Mapping[int, tuple[int, float | None]]
    ) -> dict[int, int]:
        """`pids` -> `{pid: job_id}` for those that run under a supervisor, given as
        `{supervisor pid: (job_id, its recorded start time)}`; others are left out."""
        ...
