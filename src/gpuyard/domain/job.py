"""Jobs: what a user asked for (JobSpec) and what became of it (Job)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpuyard.domain.states import JobState, check_transition

# Reasons in Slurm's words, shown by `gpuyard queue` and `gpuyard show`.
REASON_NONE = "None"
REASON_RESOURCES = "Resources"
REASON_PRIORITY = "Priority"
# Chosen to run, waiting for the jobs it preempted to stop and release their GPUs.
REASON_PREEMPTING = "Preempting"
REASON_PREEMPTED = "Preempted"
# Who a job's `--signal SIG@SECONDS` warning goes to (JobSpec.warn_target).
WARN_TARGETS = ("all", "steps", "batch")
# Kept out of the queue by its user or an admin (`gpuyard hold`) until `gpuyard release`.
REASON_HELD = "JobHeldUser"

# Waiting for the jobs it depends on (`--dependency`); and never to run, because one of them
# ended in a way the dependency excludes (the job is ended CANCELLED with this reason).
REASON_DEPENDENCY = "Dependency"
REASON_DEPENDENCY_NEVER = "DependencyNeverSatisfied"
# An array's task waiting because `%N` of its tasks already run (Slurm's words).
REASON_ARRAY_LIMIT = "JobArrayTaskLimit"

JOB_KINDS = ("batch", "interactive", "service")
# What a webhook can be told of (`--notify`, `--mail-type`).
NOTIFY_EVENTS = ("begin", "end", "fail", "requeue", "time_limit", "cancel")

# `--distributed`: how a multi-GPU job's processes find each other (docs/cli.md lists the
# variables each sets).
DISTRIBUTED_MODES = ("torchrun", "jax", "tf")


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A validated submission: the command and the resources it needs."""

    argv: tuple[str, ...]
    name: str
    workdir: str
    gpus: int = 0
    cpus: int = 1
    mem_mib: int = 0
    time_limit_s: int | None = None
    priority: int = 0
    env: tuple[tuple[str, str], ...] = ()
    # True (`--preemptible`, or the server's default): a policy may stop the job to run
    # another and requeue it; False: never (a job that does not checkpoint would start over).
    preemptible: bool = False
    distributed: str | None = None  # one of DISTRIBUTED_MODES, or None: run argv as it is
    # GPU memory per GPU (`--gpu-mem`); > 0: the job may share its GPUs with other such jobs
    # and may use no more than this on each (0: whole GPUs, all their memory).
    gpu_mem_mib: int = 0
    # Machines the job spans (`--nodes`): its `gpus` split evenly, one group per node (a Ray
    # placement group across nodes); 1: all on one machine.
    nodes: int = 1
    # What its processes get, once each, when it is cancelled, preempted or reaches its time
    # limit (`--signal`), SIGKILL after the grace period: 15 SIGTERM, 10 SIGUSR1, ...
    stop_signal: int = 15
    # A script file copied at submit, as sbatch copies its script (`gpuyard submit job.sh`):
    # its text, written to the job's folder at launch and run there in place of
    # argv[script_index] (the path it was read from), so editing the file later changes nothing.
    script: str | None = None
    script_index: int = 0
    # `--retries N`: a failed job is requeued (with backoff) up to N times; `retry_on`: the
    # classes of failure that count (RETRY_CLASSES); empty: the default classes.
    retries: int = 0
    retry_on: tuple[str, ...] = ()
    # `--signal SIG@SECONDS` (Slurm's meaning): `warn_signal` is sent `warn_before_s` seconds
    # before the time limit so the job can checkpoint; 0: no such warning.
    warn_signal: int = 0
    warn_before_s: int = 0
    # Who gets `warn_signal` (WARN_TARGETS): "all", every process of the job (gpuyard's own
    # `--signal SIG@SECONDS`); "steps", every process but the batch shell (Slurm's `--signal`
    # without `B:`: a `#!/bin/bash` script survives it, its python gets it); "batch", the
    # batch shell alone (Slurm's `B:`, for a script's `trap`).
    warn_target: str = "all"
    # -- workflows (issue 13) --
    # sbatch's `-o`/`-e`: where the job's output (and, apart, its errors) also go, patterns
    # with %j %x %A %a %u %N %%, relative to workdir; None: only the job's own log.
    output_path: str | None = None
    error_path: str | None = None
    # Tasks per node that `srun` starts inside the job (SLURM_NTASKS_PER_NODE).
    ntasks_per_node: int = 1
    # The submitter gave a task count (`-n`, `--ntasks-per-node`), one a node included: the
    # batch step holds SLURM_NTASKS as sbatch's does; False: only srun's tasks have it.
    ntasks_given: bool = False
    # GPUs each task gets (`--gpus-per-task`): srun binds each task to its own (its
    # CUDA_VISIBLE_DEVICES names only them, as Slurm's); 0: every task sees all the node's.
    gpus_per_task: int = 0
    # `--dependency` in Slurm's syntax (afterok:12:13,singleton...; `?` for "any of"); "": none.
    dependency: str = ""
    # An array's `%N` (`--array 0-99%8`): at most N of its tasks run at once; 0: no cap.
    array_max_running: int = 0
    # The array's indices as submitted (`--array 0-15:4%2`; "": none given): its tasks'
    # SLURM_ARRAY_TASK_COUNT/MIN/MAX/STEP.
    array: str = ""
    # JOB_KINDS: a batch job; an interactive session (`gpuyard run`: a pty the terminal
    # attaches to); a service (`gpuyard serve`: kept running, restarted on failure).
    kind: str = "batch"
    # A service's port on the server's machine (chosen at submit for `--port auto`; stable
    # across restarts) and the path its health check asks (""; no HTTP check).
    service_port: int = 0
    health_path: str = ""
    # A service's grace after each start before failed health checks count (`--health-grace`).
    health_grace_s: int = 60
    # The job's environment: an interpreter (`--python`), a virtualenv (`--venv`), or a
    # container image run through apptainer or podman (`--container`).
    python: str | None = None
    venv: str | None = None
    container: str | None = None
    # Webhooks told of the job's state changes (`--notify URL`), and which (NOTIFY_EVENTS;
    # `--mail-type` maps onto them; empty: the defaults, end and fail).
    notify: tuple[str, ...] = ()
    notify_events: tuple[str, ...] = ()
    # A GPU model or vendor the job's GPUs must be (`--gpu-type`, `--gres=gpu:TYPE:N`); "": any.
    gpu_type: str = ""
    # Submitted held (`sbatch --hold`, `#SBATCH -H`): the job enters the queue held, as after
    # `gpuyard hold`, in the same write (never a moment it could start), until released.
    hold: bool = False

    @property
    def gpus_per_node(self) -> int:
        return self.gpus // self.nodes


@dataclass(frozen=True, slots=True)
class Attempt:
    """One finished run of a job that was run again (a retry, a NODE_FAIL requeue, a
    preemption): kept so that `gpuyard show` lists every attempt, as sacct lists requeues."""

    number: int  # 1 for the first run
    started_at: float
    ended_at: float
    state: JobState  # how this run ended (FAILED, NODE_FAIL, PENDING for a preemption...)
    exit_code: int | None = None
    reason: str = REASON_NONE
    node: str = "local"
    gpus: tuple[int, ...] = ()


# The steps of one run kept (srun records no more): a job looping over `srun` a million times
# must not grow its record without bound.
MAX_STEPS = 1000


@dataclass(frozen=True, slots=True)
class JobStep:
    """One `srun` step of a job's last run (sacct's `JOBID.0`, `JOBID.1` rows), as the in-job
    srun recorded it: a step with no end was killed with its job before it could say so."""

    number: int  # SLURM_STEP_ID: 0 for the first srun of the run
    name: str  # the command's basename (Slurm's JobName of a step)
    ntasks: int  # tasks the step ran (on all its nodes)
    started_at: float
    ended_at: float | None = None
    exit_code: int | None = None  # the worst task's, as srun exits; None: no end recorded
    signal: int | None = None  # the signal that ended it (an exit status above 128)


@dataclass(frozen=True, slots=True)
class Job:
    """One job as the server knows it; every change makes a new Job with `version + 1`."""

    id: int
    spec: JobSpec
    owner: str
    state: JobState
    submitted_at: float
    reason: str = REASON_NONE
    gpus: tuple[int, ...] = ()
    exit_code: int | None = None
    started_at: float | None = None
    ended_at: float | None = None
    pid: int | None = None
    pid_started_at: float | None = None
    # The state the job goes to once its processes are gone: CANCELLED (the user cancelled
    # it), PENDING (the scheduler preempted it: it is requeued), NODE_FAIL (its GPU was
    # drained) or OUT_OF_MEMORY (it used more GPU memory than its --gpu-mem).
    stop_intent: JobState | None = None
    version: int = 1
    node: str = "local"
    attained_gpu_s: float = 0.0  # GPU-seconds held in earlier runs (before each requeue)
    restarts: int = 0  # times it was requeued (preempted, retried, after a node failure)
    # Held (`gpuyard hold`): a pending job the scheduler's gate keeps out of the policy until
    # `release`; stored so that a restarted server holds it again.
    held: bool = False
    # `gpuyard restart`: the finished job this one runs again (same spec, new id).
    restart_of: int | None = None
    # Earlier runs of this job (retries, requeues, preemptions), oldest first.
    attempts: tuple[Attempt, ...] = ()
    # The `Idempotency-Key` its submit carried: a retried submit with the same key (same
    # owner) returns this job instead of making another.
    idempotency_key: str | None = None
    # Not started before this time (epoch seconds): a retry's backoff; None: as soon as it fits.
    not_before: float | None = None
    # Bytes of output its log lost because the log's disk was full (the job ran on; the log
    # is marked truncated where the bytes are missing).
    log_dropped_bytes: int = 0
    # An array's task (`--array`): the array's id (its first task's job id, Slurm's %A,
    # SLURM_ARRAY_JOB_ID) and this task's index (%a, SLURM_ARRAY_TASK_ID); None: not in an array.
    array_job_id: int | None = None
    array_task_id: int | None = None
    # What its last run's processes used, as the kernel counted them (sacct's MaxRSS and
    # TotalCPU): the largest resident set of any of them, KiB, and their user + system CPU
    # seconds; None: not measured (not ended yet, or ended without its supervisor's record).
    max_rss_kib: int | None = None
    cpu_time_s: float | None = None
    # Its last run's `srun` steps, by number (the first MAX_STEPS of them); empty: none ran.
    steps: tuple[JobStep, ...] = ()

    def transition(self, target: JobState, **changes: object) -> Job:
        """Return this job moved to `target` (checked against the transition table)."""
        check_transition(self.id, self.state, target)
        return replace(self, state=target, version=self.version + 1, **changes)  # type: ignore[arg-type]

    def with_changes(self, **changes: object) -> Job:
        """Return this job with non-state fields changed and the version bumped."""
        return replace(self, version=self.version + 1, **changes)  # type: ignore[arg-type]


def display_state(job: Job) -> str:
    """The state a person is shown: a RUNNING job told to stop whose processes are still
    exiting is CANCELLING (cancelled by its user) or COMPLETING (any other stop: a preemption,
    a requeue, a drain), as squeue's CG; the stored state stays RUNNING until they are gone."""
    if job.state is JobState.RUNNING and job.stop_intent is not None:
        return "CANCELLING" if job.stop_intent is JobState.CANCELLED else "COMPLETING"
    return job.state.value


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU of the inventory; `detected` is False for GPUs an admin declared."""

    index: int
    uuid: str
    name: str
    memory_total_mib: int | None
    detected: bool
    node: str = "local"
    pci_bus_id: str = ""  # NVML's "00000000:3B:00.0" ("" when unknown: a declared GPU)
    serial: str = ""  # the board's serial number (amdsmi; "" when unknown)
    # AMD partition modes where the library reports them: compute ("SPX", "DPX", "CPX"...),
    # memory ("NPS1", "NPS4"...) and this GPU's partition among its board's; "": none.
    compute_partition: str = ""
    memory_partition: str = ""
    partition_id: int = 0
    vendor: str = ""  # "nvidia" or "amd" for a detected GPU; "" for a declared one
    # The GPU's architecture as its frameworks name it: NVIDIA's compute capability ("9.0"),
    # AMD's gfx target ("gfx942"); "" when unknown.
    arch: str = ""
    # The GPU's index in its vendor's own numbering on its machine (NVML's, amdsmi's): what
    # CUDA_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES name. None: the same as `index`.
    device_index: int | None = None


@dataclass(frozen=True, slots=True)
class NodeCapacity:
    """What one machine offers to jobs besides GPUs."""

    name: str
    cpus: int
    mem_mib: int


@dataclass(frozen=True, slots=True)
class Drain:
    """Why a GPU is out of service: no new job is placed on it until it is resumed."""

    reason: str
    source: str  # "admin" (gpuyard admin drain) or "auto" (a GPU failure was detected)
    drained_at: float
