"""API v1 wire models: strict (unknown fields are refused), documented, stable."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from gpuyard.domain.retry import MAX_RETRIES
from gpuyard.domain.spec_rules import MAX_NAME_CHARS


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class JobSubmitIn(_Strict):
    """A job submission. Sizes and durations are strings in Slurm's forms.

    Types and ranges only: what makes a spec valid and its defaults are `domain/spec_rules.py`'s.
    """

    command: Annotated[list[StrictStr], Field(min_length=1, description="argv; never a shell line")]
    name: Annotated[StrictStr | None, Field(max_length=MAX_NAME_CHARS)] = None
    gpus: Annotated[StrictInt, Field(ge=0, le=1024, description="0 with gpu_mem: 1")] = 0
    cpus: Annotated[StrictInt, Field(ge=1, le=4096)] = 1
    mem: Annotated[StrictStr | None, Field(description="e.g. 16G, 512M; bare number = MiB")] = None
    time_limit: Annotated[
        StrictStr | None, Field(description="minutes, [D-]HH:MM:SS, or 30s/90m/2h/1d")
    ] = None
    priority: Annotated[StrictInt, Field(ge=-1_000_000, le=1_000_000)] = 0
    workdir: Annotated[
        StrictStr | None,
        Field(
            description="absolute path on the server; null: the owner's home on a server that "
            "runs jobs as their owners (as root), else the server's home. The CLI and the SDK "
            "send their own working directory"
        ),
    ] = None
    env: dict[StrictStr, StrictStr] = Field(default_factory=dict)
    preemptible: Annotated[
        StrictBool | None,
        Field(
            description="true: a policy may stop it to run another job and requeue it "
            "(--preemptible); false: never; null: the server's default (false unless its admin "
            "set --preemptible-default)"
        ),
    ] = None
    distributed: Annotated[
        Literal["torchrun", "jax", "tf"] | None,
        Field(description="one process per GPU through torchrun, or JAX/TF cluster variables"),
    ] = None
    nodes: Annotated[
        StrictInt,
        Field(ge=1, le=1024, description="machines the job spans; its gpus split evenly over them"),
    ] = 1
    gpu_mem: Annotated[
        StrictStr | None,
        Field(
            description="GPU memory per GPU, e.g. 20G: the job may share its GPUs with other "
            "such jobs and is held to this much on each; null: whole GPUs"
        ),
    ] = None
    stop_signal: Annotated[
        StrictStr | StrictInt | None,
        Field(
            description="what its processes get, once each, when it is cancelled, preempted "
            "or reaches its time limit (then SIGKILL after the grace period): a name (USR1, "
            "SIGUSR1) or number; null: SIGTERM"
        ),
    ] = None
    script: Annotated[
        StrictStr | None,
        Field(
            description="the text of the script file the command runs, copied at submit as "
            "sbatch does: the job runs this copy (from its folder) in place of "
            "command[script_index], so editing the file later changes nothing; at most 1 MiB"
        ),
    ] = None
    script_index: Annotated[
        StrictInt, Field(ge=0, description="which argument of command is the script's path")
    ] = 0
    retries: Annotated[
        StrictInt,
        Field(ge=0, le=MAX_RETRIES, description="times a failed job is requeued (with backoff)"),
    ] = 0
    retry_on: Annotated[
        list[Literal["failed", "timeout", "oom", "launch"]],
        Field(description="failures retries apply to; empty: failed (a non-zero exit)"),
    ] = Field(default_factory=list)
    warn_signal: Annotated[
        StrictStr | StrictInt | None,
        Field(
            description="a signal sent warn_before_s seconds before the time limit, so the "
            "job can checkpoint (Slurm's --signal SIG@SECONDS); null: none"
        ),
    ] = None
    warn_before_s: Annotated[
        StrictInt, Field(ge=0, description="how long before the time limit warn_signal comes")
    ] = 0
    warn_target: Literal["all", "steps", "batch"] = Field(
        "all",
        description='who gets warn_signal: "all" every process of the job; "steps" every '
        'process but the batch shell (sbatch\'s --signal without B:); "batch" the batch '
        "shell alone (sbatch's --signal=B:)",
    )
    array: Annotated[
        StrictStr | None,
        Field(
            max_length=4096,
            description="a job array, sbatch's --array: 0-99%8, 1,3,5, 0-15:4; one task (job) "
            "per index, %N: at most N running; the answer is the first task, whose id is the "
            "array's (%A)",
        ),
    ] = None
    output_path: Annotated[
        StrictStr | None,
        Field(description="sbatch -o: the output also goes here (%j %x %A %a %u %N), "
              "relative to workdir"),
    ] = None  # fmt: skip
    error_path: Annotated[
        StrictStr | None, Field(description="sbatch -e: standard error goes here apart")
    ] = None
    ntasks_per_node: Annotated[
        StrictInt, Field(ge=1, le=1024, description="tasks per node srun starts in the job")
    ] = 1
    ntasks_given: StrictBool = Field(
        False,
        description="a task count was given (sbatch -n, --ntasks-per-node): the batch "
        "step has SLURM_NTASKS, even for one task a node",
    )
    gpus_per_task: Annotated[
        StrictInt,
        Field(ge=0, le=1024, description="sbatch's --gpus-per-task: srun binds each task to "
              "its own GPUs; gpus must be this x the tasks; 0: tasks see all the node's"),
    ] = 0  # fmt: skip
    dependency: Annotated[
        StrictStr,
        Field(description="Slurm's --dependency: afterok:ID[:ID], afterany, afternotok, "
              "aftercorr, singleton; ',' all of, '?' any of"),
    ] = ""  # fmt: skip
    kind: Annotated[
        Literal["batch", "interactive", "service"],
        Field(description="batch; interactive (gpuyard run: a terminal attaches through a "
              "pty); service (gpuyard serve: kept running, restarted on failure)"),
    ] = "batch"  # fmt: skip
    service_port: Annotated[
        StrictInt,
        Field(ge=0, le=65535, description="a service's port; 0 with kind service: chosen "
              "by the server"),
    ] = 0  # fmt: skip
    health_path: Annotated[
        StrictStr, Field(max_length=2048, description="a service's HTTP health check path")
    ] = ""
    health_grace_s: Annotated[
        StrictInt,
        Field(ge=0, le=86_400, description="a service's grace after each start before failed "
              "health checks count"),
    ] = 60  # fmt: skip
    python: Annotated[
        StrictStr | None, Field(description="the interpreter the job runs (absolute path)")
    ] = None
    venv: Annotated[
        StrictStr | None, Field(description="a virtualenv the job runs in (absolute path)")
    ] = None
    container: Annotated[
        StrictStr | None, Field(description="a container image run through apptainer or podman")
    ] = None
    notify: list[StrictStr] = Field(
        default_factory=list, description="webhook URLs told of the job's state changes"
    )
    notify_events: list[StrictStr] = Field(
        default_factory=list,
        description="begin, end, fail, requeue, time_limit, cancel; empty: end and fail",
    )
    gpu_type: Annotated[
        StrictStr, Field(max_length=64, description="a GPU model or vendor: a100, h100, mi300x")
    ] = ""
    hold: StrictBool = Field(
        False, description="submit it held (sbatch --hold): it waits until released"
    )


class StepOut(BaseModel):
    """One `srun` step of a job's last run (sacct's `JOBID.0` rows), as the job's srun
    recorded it. Times are ISO 8601 in UTC, to the second."""

    number: int = Field(description="the step's id (SLURM_STEP_ID): 0 for the run's first srun")
    name: str = Field(description="the command's basename (sacct's JobName of a step)")
    ntasks: int = Field(description="tasks the step ran")
    started_at: str
    ended_at: str | None = Field(description="null: it was still running when its job ended")
    exit_code: int | None = Field(
        description="the worst task's exit status, as srun exits; null: no end recorded"
    )
    signal: int | None = Field(description="the signal that ended it (a status above 128)")


class AttemptOut(BaseModel):
    """One earlier run of a job that was run again (a retry, a requeue after a node failure,
    a preemption), as sacct lists a requeued job's runs. Times are ISO 8601 in UTC."""

    number: int = Field(description="1 for the first run")
    started_at: str | None
    ended_at: str | None
    state: str = Field(
        description="how this run ended: FAILED, TIMEOUT, OUT_OF_MEMORY, NODE_FAIL; PENDING "
        "for a run stopped to be requeued (preempted, requeued by its user or a drain)"
    )
    exit_code: int | None
    reason: str | None
    node: str
    gpus: list[int] = Field(description="indices of the GPUs this run held")


class ServiceHealthOut(BaseModel):
    """A running service's health check (`gpuyard serve`). Times are ISO 8601 in UTC."""

    state: Literal["starting", "healthy", "unhealthy", "unchecked"] = Field(
        description="starting: not answered yet since its start; healthy: its last check "
        "answered; unhealthy: its checks fail (restarted past its grace); unchecked: not "
        "checked from the server (on another machine)"
    )
    since: str | None = Field(description="in this state since")
    checked_at: str | None = Field(description="the last check")
    last_error: str | None = Field(description="what the last failed check saw")
    failures: int = Field(0, description="failed checks in a row")


class JobGpuStatsOut(BaseModel):
    """What a job did with its GPUs while the server sampled them (1 Hz)."""

    util_mean_pct: float | None = Field(description="mean GPU utilisation over its GPUs")
    util_peak_pct: int | None = Field(description="highest utilisation of any of its GPUs")
    memory_peak_mib: int | None = Field(description="highest GPU memory it used, all GPUs")
    memory_peak_per_gpu_mib: int | None = Field(
        None, description="highest GPU memory it used on any one GPU (what --gpu-mem caps)"
    )
    gpu_hours: float = Field(description="GPUs held x hours sampled")
    sampled_s: float
    samples: int
    energy_j: float | None = Field(
        None,
        description="energy its GPUs used while it ran, in joules (an even share of a GPU "
        "shared with other jobs): from the GPUs' energy counters, or power x time where "
        "energy_integrated; sacct's ConsumedEnergy. null: no power reading",
    )
    energy_integrated: bool = Field(
        False, description="some of energy_j is power x time (a GPU without an energy counter)"
    )


class JobOut(BaseModel):
    """One job. Times are ISO 8601 in UTC, or null."""

    id: int
    name: str
    owner: str
    state: str
    display_state: str = Field(
        description="state to show: CANCELLING/COMPLETING while a stopped RUNNING job's "
        "processes are still exiting, else `state`"
    )
    reason: str | None = Field(description="why it is in its state; null: no reason")
    command: list[str]
    gpus: list[int] = Field(description="indices of the GPUs the job holds or held")
    num_gpus: int = Field(description="GPUs requested")
    cpus: int
    mem_mib: int
    time_limit_s: int | None
    priority: int
    workdir: str
    node: str = Field(description="where it runs or last ran; empty before its first start")
    exit_code: int | None
    submitted_at: str
    started_at: str | None
    ended_at: str | None
    runtime_s: float | None
    log_path: str
    preemptible: bool = Field(description="a policy may stop it to run another job (requeued)")
    distributed: str | None
    gpu_mem_mib: int = Field(0, description="GPU memory per GPU asked for; 0: whole GPUs")
    nodes: int = Field(1, description="machines the job spans (its GPUs split evenly)")
    restarts: int = Field(
        description="times it was requeued: preempted, retried (--retries), after a node failure"
    )
    held: bool = Field(False, description="held (gpuyard hold): not started until released")
    restart_of: int | None = Field(
        None, description="gpuyard restart: the finished job this one runs again"
    )
    attained_gpu_s: float = Field(description="GPU-seconds held so far, all runs")
    estimated_start_at: str | None = Field(
        description="pending jobs: projected start if running jobs use their whole time limit"
    )
    expected_run_s: float | None = Field(
        None,
        description="GET /jobs/{id} of a pending or running job: how long it is expected to "
        "run in all, from its owner's recent runs like it, at most its time limit; null: no "
        "history and no limit",
    )
    expected_run: str | None = Field(
        None, description='expected_run_s in words, e.g. "expected 40 min (35-50 min), from '
        'your last 5 runs of this size"',
    )
    estimate_assumes: Literal["preemption"] | None = Field(
        None,
        description='"preemption": estimated_start_at holds only if the policy preempts a '
        "running job for it (or for a job ahead of it); null: only that running jobs end",
    )
    rank: int | None = Field(
        None,
        description="pending jobs the scheduling policy holds: place in its order as of the "
        "last pass, 1 = next to start; null: not pending, or held back before the policy",
    )
    rank_among: int | None = Field(None, description="how many pending jobs the policy orders")
    rank_order: str | None = Field(
        None,
        description='GET /jobs/{id}: the policy and what its order sorts by, e.g. "default: '
        'least expected remaining GPU-time first, divided by the share weight"',
    )
    rank_factors: str | None = Field(
        None,
        description="GET /jobs/{id}: the factors of the job's key in words, sprio-style "
        '(e.g. "GPUs 4, expected run left 30 min per GPU (...), share weight 1, age waited '
        '10 min, ...")',
    )
    stop_signal: int = Field(
        15, description="signal its processes get when it is stopped (then SIGKILL)"
    )
    retries: int = Field(0, description="times a failed run is requeued (--retries)")
    retry_on: list[str] = Field(
        default_factory=list, description="failure classes retried; empty: failed"
    )
    warn_signal: int = Field(0, description="signal sent warn_before_s before the limit; 0: none")
    warn_before_s: int = Field(0, description="how long before the time limit warn_signal comes")
    warn_target: str = Field(
        "all", description='who gets warn_signal: "all", "steps" (not the batch shell), "batch"'
    )
    log_dropped_bytes: int = Field(
        0, description="bytes of output the log lost because its disk was full (the job ran on)"
    )
    attempts: list[AttemptOut] = Field(
        default_factory=list,
        description="its earlier runs, oldest first (the current or last run is the job's own "
        "started_at, ended_at, state)",
    )
    not_before: str | None = Field(
        None, description="not started before this time: a retry's backoff (reason BeginTime)"
    )
    idle_since: str | None = Field(
        None, description="running jobs flagged idle: since when their GPUs stayed unused"
    )
    gpu_stats: JobGpuStatsOut | None = Field(
        default=None, description="null: the job's GPUs were never sampled (no NVML)"
    )
    hint: str | None = Field(
        None, description="submit only: advice for next time, e.g. a --gpu-mem from earlier runs"
    )
    output_path: str | None = Field(None, description="sbatch -o pattern, as given")
    error_path: str | None = Field(None, description="sbatch -e pattern, as given")
    ntasks_per_node: int = Field(1, description="tasks per node srun starts")
    ntasks_given: bool = Field(False, description="a task count was given (sbatch -n)")
    gpus_per_task: int = Field(0, description="GPUs bound to each task; 0: not bound")
    dependency: str = Field("", description="--dependency, as given")
    array_max_running: int = Field(0, description="an array's %N; 0: no cap")
    array: str = Field("", description="an array task's --array, as given")
    array_job_id: int | None = Field(None, description="an array task's array id (%A)")
    array_task_id: int | None = Field(None, description="an array task's index (%a)")
    max_rss_kib: int | None = Field(
        None, description="its last run's largest resident set of any process, KiB (MaxRSS)"
    )
    cpu_time_s: float | None = Field(
        None, description="its last run's user + system CPU seconds, all processes (TotalCPU)"
    )
    steps: list[StepOut] = Field(
        default_factory=list,
        description="its last run's srun steps, by number (at most 1000); empty: none ran, or "
        "it has not ended yet",
    )
    kind: str = Field("batch", description="batch, interactive or service")
    service_port: int = Field(0, description="a service's port on the server's machine")
    health_path: str = Field("", description="a service's health check path")
    health_grace_s: int = Field(60, description="a service's grace after each start")
    service_url: str | None = Field(
        None, description="a service's local address on the server's machine (http://HOST:PORT)"
    )
    service_health: ServiceHealthOut | None = Field(
        None, description="a running service's health check; null: not a running service"
    )
    python: str | None = Field(None, description="--python")
    venv: str | None = Field(None, description="--venv")
    container: str | None = Field(None, description="--container")
    notify_events: list[str] = Field(default_factory=list, description="events webhooks get")
    gpu_type: str = Field("", description="GPU model or vendor asked for")
    hold: bool = Field(False, description="submitted held (sbatch --hold)")


class JobUpdateIn(_Strict):
    """`gpuyard update`: what changes in a pending job (null: unchanged)."""

    time_limit: Annotated[
        StrictStr | None, Field(description="minutes, [D-]HH:MM:SS, or 30s/90m/2h/1d")
    ] = None
    priority: Annotated[StrictInt | None, Field(ge=-1_000_000, le=1_000_000)] = None
    gpus: Annotated[StrictInt | None, Field(ge=0, le=1024)] = None


class CleanOut(BaseModel):
    """`POST /api/v1/jobs/clean`: finished jobs forgotten, and any whose folder stayed."""

    cleaned: int
    folders_kept: list[int] = Field(
        default_factory=list, description="jobs whose folder could not be removed"
    )


MAX_CANCEL_IDS = 100_000


class CancelManyIn(_Strict):
    """`POST /api/v1/jobs/cancel`: cancel many jobs in one request (`scancel -u USER`)."""

    ids: Annotated[list[StrictInt], Field(min_length=1, max_length=MAX_CANCEL_IDS)]
    signal: Annotated[
        StrictStr | None,
        Field(max_length=16, description="what running jobs' processes get instead of their "
              "own stop signal (a name such as USR1, or a number)"),
    ] = None  # fmt: skip
    whole_arrays: StrictBool = Field(
        False, description="an array's id (its first task's) stands for all its tasks"
    )


class CancelRefusedOut(BaseModel):
    id: int
    code: str = Field(description="not_found, conflict (already ended), ...")
    message: str


class CancelManyOut(BaseModel):
    """What a bulk cancel did: pending jobs cancelled, running ones asked to stop, and those
    refused (the others are cancelled all the same)."""

    cancelled: list[int]
    stopping: list[int]
    refused: list[CancelRefusedOut]


class WhoAmIOut(BaseModel):
    """The account the caller's token acts as (`queue --me`)."""

    user: str
    role: str
    team: str | None = None
    scope: str = "admin"  # what the token allows: read, submit or admin


class DryRunOut(BaseModel):
    """`submit --dry-run`: the job fits this server; when it would start if submitted now."""

    now: str
    start_at: str | None = Field(description="null: see not_before")
    starts_in_s: float | None
    not_before: str | None = Field(
        description="start_at null: not before this time (the projection stopped there); "
        "both null: not before jobs without a time limit end"
    )
    estimate_assumes: Literal["preemption"] | None = Field(
        None, description='"preemption": start_at holds only if the policy preempts as it plans'
    )
    waits_for: str | None = Field(
        None,
        description='the resource it would wait for now, e.g. "CPUs (2 of 2 in use)"; null: '
        "it fits now (only jobs queued ahead of it can delay it)",
    )
    after_jobs: list[int] = Field(
        [], description="the jobs whose ends at their time limits let it start at start_at"
    )
    expected_run_s: float | None = Field(
        None, description="how long it is expected to run (as JobOut's); null: nothing known"
    )
    expected_run: str | None = Field(None, description="expected_run_s in words")


class GpuProcessOut(BaseModel):
    """A compute process NVML lists on a GPU, and the job it runs under (null: not ours)."""

    pid: int
    memory_used_mib: int | None
    job: int | None
    user: str | None = Field(description="the owner of that job")
    misplaced: bool = Field(
        False, description="a job's process on a GPU that is not allocated to that job"
    )


class NodeOut(BaseModel):
    """One machine as `gpuyard nodes` (Slurm's `sinfo -N`) lists it."""

    name: str
    state: str = Field(description="idle, mix, alloc, drain or down (its agent is not answering)")
    gpus: int
    gpus_used: int
    gpus_drained: int
    gpu_types: list[str]
    cpus: int
    cpus_used: int
    mem_mib: int
    jobs: int = Field(description="running jobs with a part on this machine")
    agent_version: str = Field(description="the gpuyard version its agent runs")
    last_heard: float | None = Field(description="when its agent last answered (epoch s)")


class NodeDoctorOut(BaseModel):
    """One machine's `gpuyard doctor` facts, gathered on it (the doctor model's fields:
    driver, python, disk, rocm, confinement), judged by the CLI."""

    node: str
    facts: dict[str, Any]


class GpuOut(BaseModel):
    """One GPU of the inventory, the job holding it and its live telemetry (null: n/a:
    declared GPU, not sampled yet, or the driver lacks that metric)."""

    index: int
    uuid: str
    name: str
    memory_total_mib: int | None
    detected: bool = Field(description="true from NVML or amdsmi, false when declared by the admin")
    vendor: str = Field("", description='"nvidia" or "amd"; "" for a declared GPU')
    arch: str = Field(
        "", description='compute capability ("9.0") or AMD gfx target ("gfx942"); "": unknown'
    )
    serial: str = Field("", description='the board serial number (AMD); "": unknown')
    compute_partition: str = Field(
        "", description='AMD compute partition mode ("SPX", "CPX"...); "": none reported'
    )
    memory_partition: str = Field(
        "", description='AMD memory partition mode ("NPS1", "NPS4"...); "": none reported'
    )
    drained: bool = Field(False, description="out of service: no new job is placed on it")
    drain_reason: str | None = Field(None, description="why (admin or a detected failure)")
    hot: str | None = Field(
        None, description="too hot or throttled: new jobs go to a cool GPU first (why)"
    )
    node: str
    job: int | None = Field(description="the job holding it (the first, on a shared GPU)")
    user: str | None = Field(default=None, description="the owner of the job holding it")
    jobs: list[int] = Field(
        default_factory=list, description="every job on it (several: shared with --gpu-mem)"
    )
    shared_free_mib: int | None = Field(
        None, description="shared GPU: memory still free for --gpu-mem jobs; null: not shared"
    )
    sampled_at: str | None = Field(default=None, description="time of the telemetry below")
    error: str | None = Field(default=None, description="why it could not be read, e.g. lost")
    util_pct: int | None = None
    memory_util_pct: int | None = None
    memory_used_mib: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: int | None = None
    throttle_reasons: list[str] | None = None
    ecc_errors_corrected: int | None = Field(default=None, description="volatile ECC count")
    ecc_errors_uncorrected: int | None = None
    xid_errors: int | None = Field(
        default=None, description="critical XID events since the server started"
    )
    last_xid: int | None = None
    processes: list[GpuProcessOut] | None = Field(
        default=None, description="null: n/a; refreshed every ~2 s"
    )


class ServerInfoOut(BaseModel):
    """What the server runs with."""

    version: str
    gpus_source: str
    num_gpus: int
    cpus: int
    mem_mib: int
    owner: str
    policy: str = Field(description="the scheduling policy (gpuyard server --policy)")
    confinement: str | None = Field(
        None, description="how jobs are held to --mem, --cpus and their GPUs (cgroups), or why not"
    )


class ErrorBody(BaseModel):
    code: str
    message: str
    field: str | None = None


class ErrorOut(BaseModel):
    error: ErrorBody


class DrainIn(_Strict):
    """`gpuyard admin drain`: why the GPU goes out of service."""

    reason: Annotated[StrictStr, Field(max_length=200)] = ""
    now: Annotated[
        StrictBool,
        Field(description="stop the jobs running on it and requeue them; false: they finish"),
    ] = False


class DrainOut(BaseModel):
    """A drain's outcome: the jobs on the GPU finish there, or (`now`) were requeued."""

    gpu: int
    drained: bool
    failed_jobs: list[int] = Field(
        description="jobs stopped to end NODE_FAIL (a broken GPU's drain; never an admin's)"
    )
    running_jobs: list[int] = Field(
        default_factory=list, description="jobs left to finish on it (a drain without `now`)"
    )
    requeued_jobs: list[int] = Field(
        default_factory=list, description="jobs stopped and put back in the queue (`now`)"
    )
