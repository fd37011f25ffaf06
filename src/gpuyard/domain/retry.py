"""Which failures `--retries N` retries (`--retry-on`), in classes a user can name.

    failed     the command exited non-zero or was killed by a signal (default)
    timeout    it reached its time limit
    oom        it ran out of memory (host --mem or its --gpu-mem): retrying rarely helps,
               so only when asked
    launch     the command could not be started (not found, not executable): a typo does
               not fix itself, so only when asked

A job whose GPU or machine failed (NODE_FAIL) is requeued without `--retries`, up to the
server's limit, as Slurm requeues on a node failure; past it the job is held with the reason
(`gpuyard release` runs it again). Every run that ended is kept on the job (`Job.attempts`).

A service (`gpuyard serve`, kind "service") is restarted after any end but a cancel or its own
time limit, without a count: exited 0, failed, killed, out of memory, its node lost, stopped by
its health check. The back-off grows with each short run in a row (`service_backoff_s` ·
2^(n-1), at most `service_backoff_max_s`) and starts over after a run that lasted
`service_healthy_s`: a server that crashes at once is not restarted in a busy loop, and one
that ran for a day and crashed once comes back at once.

    settle_service_end(service, JobState.FAILED, 1, "NonZeroExitCode: ...", now, RetryRules())
        -> PENDING, not_before = now + 2 s (4 s, 8 s, ... after more short runs in a row)

    settle_end(job, JobState.FAILED, 1, "NonZeroExitCode: ...", now, RetryRules())
        -> PENDING, attempts + (run 1,), not_before = now + 10 s   (with --retries 1)
        -> FAILED                                                     (without)
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuyard.domain.errors import InvalidRequest
from gpuyard.domain.job import REASON_HELD, Attempt, Job, JobSpec
from gpuyard.domain.states import JobState

RETRY_CLASSES = ("failed", "timeout", "oom", "launch")
DEFAULT_RETRY_ON = ("failed",)
MAX_RETRIES = 100
# Runs kept on a job (`Job.attempts`): beyond it the oldest preemptions are dropped.
MAX_ATTEMPTS_KEPT = 200
# Reasons that name why a run was retried or a job held (`gpuyard show`, `queue`).
REASON_LAUNCH_FAILED = "LaunchFailed"  # the command could not be started
REASON_NODE_FAIL_LIMIT = "NodeFailLimit"  # held: its node failed more often than the limit
REASON_BEGIN_TIME = "BeginTime"  # waiting out a retry's backoff (Slurm's word)
REASON_SERVICE_RESTART = "ServiceRestart"  # a service requeued after its run ended
REASON_UNHEALTHY = "Unhealthy"  # a service stopped by its health check (then restarted)
_CLASS_OF_STATE = {JobState.TIMEOUT: "timeout", JobState.OUT_OF_MEMORY: "oom"}


def check_retry_on(classes: tuple[str, ...], retries: int) -> tuple[str, ...]:
    """`classes` sorted and without repeats; raises InvalidRequest (one line) for an unknown
    class, or for classes given without any retries to spend on them."""
    unknown = sorted(set(classes) - set(RETRY_CLASSES))
    if unknown:
        raise InvalidRequest(
            f"retry_on: unknown class {unknown[0]!r}; give some of {', '.join(RETRY_CLASSES)}",
            field="retry_on",
        )
    if classes and retries == 0:
        raise InvalidRequest(
            "retry_on needs retries: give --retries N (how many times to try again)",
            field="retry_on",
        )
    return tuple(sorted(set(classes), key=RETRY_CLASSES.index))


@dataclass(frozen=True, slots=True)
class RetryRules:
    """The server's side of retries (its settings): the backoff before each retry,
    `backoff_s` · 2^(n-1) for retry n capped at `backoff_max_s`, and how many times a job is
    requeued after node failures before it is held (0: never requeued, it ends NODE_FAIL)."""

    backoff_s: float = 10.0
    backoff_max_s: float = 600.0
    node_fail_requeues: int = 3
    # Services: the back-off before restart n of short runs in a row, and the run length
    # after which the count starts over.
    service_backoff_s: float = 2.0
    service_backoff_max_s: float = 300.0
    service_healthy_s: float = 300.0

    def backoff_for(self, retry: int) -> float:
        """Seconds to wait before retry number `retry` (1 for the first)."""
        return min(self.backoff_max_s, self.backoff_s * 2.0 ** min(max(retry - 1, 0), 60))

    def service_backoff_for(self, short_runs: int) -> float:
        """Seconds before a service's restart after `short_runs` short runs in a row (0: the
        run that ended was long: at once)."""
        if short_runs <= 0:
            return 0.0
        exponent = min(max(short_runs - 1, 0), 60)
        return min(self.service_backoff_max_s, self.service_backoff_s * 2.0**exponent)


def failure_class(state: JobState, reason: str) -> str | None:
    """The retry class of a run that ended in `state` with `reason` (the controller's
    verdict); None for an end no `--retry-on` names (completed, cancelled, NODE_FAIL)."""
    if state is JobState.FAILED:
        return "launch" if reason.startswith(REASON_LAUNCH_FAILED) else "failed"
    return _CLASS_OF_STATE.get(state)


def retried_classes(spec: JobSpec) -> tuple[str, ...]:
    return spec.retry_on or DEFAULT_RETRY_ON


def retries_used(job: Job) -> int:
    """Retries spent so far: the earlier runs that ended in a retried failure."""
    return sum(1 for a in job.attempts if a.state in _CLASS_OF_STATE or a.state is JobState.FAILED)


def node_failures(job: Job) -> int:
    """Earlier runs that ended NODE_FAIL (each was requeued or held)."""
    return sum(1 for a in job.attempts if a.state is JobState.NODE_FAIL)


def settle_end(
    job: Job,
    state: JobState,
    exit_code: int | None,
    reason: str,
    ended_at: float,
    rules: RetryRules,
    *,
    out_of_service: bool = True,
) -> Job:
    """The record of a RUNNING job whose run ended in the terminal `state`: requeued (PENDING,
    the run kept as an Attempt, its GPUs freed) when `--retries` covers the failure, with
    `not_before` its backoff; requeued after a node failure, or held past the server's limit;
    otherwise ended as judged.

    A node failure whose GPUs are `out_of_service` already (a broken GPU's drain stopped the
    job) is requeued at once: the scheduler will not place it there again. One the executor
    saw first (a Ray machine lost under the job) waits a backoff, time for the node watch to
    take the machine out of service, so the job is not placed on it again meanwhile."""
    if state is JobState.NODE_FAIL and rules.node_fail_requeues > 0:
        run = attempt_of(job, state, exit_code, reason, ended_at)
        failures = node_failures(job) + 1
        if failures <= rules.node_fail_requeues:
            why = f"NodeFailRequeue: requeued after node failure {failures} ({reason})"
            wait = None if out_of_service else ended_at + rules.backoff_for(failures)
            return requeue(job, run, ended_at, why, not_before=wait)
        why = (
            f"{REASON_NODE_FAIL_LIMIT}: {failures} node failures, more than the "
            f"{rules.node_fail_requeues} requeues allowed (last: {reason}); "
            f"`gpuyard release {job.id}` runs it again"
        )
        return requeue(job, run, ended_at, why, held=True)
    kind = failure_class(state, reason)
    used = retries_used(job)
    if kind is not None and kind in retried_classes(job.spec) and used < job.spec.retries:
        run = attempt_of(job, state, exit_code, reason, ended_at)
        wait_s = rules.backoff_for(used + 1)
        why = f"Retry {used + 1} of {job.spec.retries} after {state.value} ({reason})"
        return requeue(job, run, ended_at, why, not_before=ended_at + wait_s)
    return job.transition(state, exit_code=exit_code, ended_at=ended_at, reason=reason)


def settle_service_end(
    job: Job,
    state: JobState,
    exit_code: int | None,
    reason: str,
    ended_at: float,
    rules: RetryRules,
) -> Job:
    """The record of a service (kind "service") whose run ended in `state`: CANCELLED and
    TIMEOUT (its own `--time`) end it; any other end requeues it with the back-off of its
    short runs in a row (`service_backoff_for`), for as long as it takes."""
    if state in (JobState.CANCELLED, JobState.TIMEOUT):
        return job.transition(state, exit_code=exit_code, ended_at=ended_at, reason=reason)
    run = attempt_of(job, state, exit_code, reason, ended_at)
    short = short_runs(job, run, rules.service_healthy_s)
    wait_s = rules.service_backoff_for(short)
    why = f"{REASON_SERVICE_RESTART}: restart {job.restarts + 1} after {state.value} ({reason})"
    return requeue(job, run, ended_at, why, not_before=ended_at + wait_s if wait_s else None)


def short_runs(job: Job, run: Attempt, healthy_s: float) -> int:
    """How many runs in a row, `run` (the one that just ended) included, lasted less than
    `healthy_s`; 0 when `run` itself lasted that long (the back-off starts over)."""
    count = 0
    for attempt in (run, *reversed(job.attempts)):
        if attempt.state is JobState.PENDING:
            continue  # a preemption says nothing of the service's health
        if attempt.ended_at - attempt.started_at >= healthy_s:
            break
        count += 1
    return count


def attempt_of(
    job: Job, state: JobState, exit_code: int | None, reason: str, ended_at: float
) -> Attempt:
    """The run of `job` that just ended, as `gpuyard show` lists it."""
    number = job.attempts[-1].number + 1 if job.attempts else 1
    started = job.started_at if job.started_at is not None else ended_at
    return Attempt(number, started, ended_at, state, exit_code, reason, job.node, job.gpus)


def requeue(
    job: Job,
    run: Attempt,
    stopped_at: float,
    reason: str,
    *,
    not_before: float | None = None,
    held: bool = False,
) -> Job:
    """`job` back in the queue after `run`: its GPUs freed, the run kept (the oldest
    preemptions dropped past MAX_ATTEMPTS_KEPT), `restarts` + 1 (GPUYARD_RESTART_COUNT, as
    SLURM_RESTART_COUNT counts every requeue) and the GPU service it attained kept (what LAS
    ranks by)."""
    started = stopped_at if job.started_at is None else job.started_at
    ran_s = max(0.0, stopped_at - started)
    return job.transition(
        JobState.PENDING, gpus=(), started_at=None, pid=None, pid_started_at=None,
        stop_intent=None, exit_code=None, reason=reason, restarts=job.restarts + 1,
        attained_gpu_s=job.attained_gpu_s + len(job.gpus) * ran_s,
        attempts=_kept((*job.attempts, run)), not_before=not_before, held=job.held or held,
    )  # fmt: skip


def _kept(attempts: tuple[Attempt, ...]) -> tuple[Attempt, ...]:
    """At most MAX_ATTEMPTS_KEPT runs: the oldest preemptions go first (a preemptible job may
    be preempted without end; retries and node failures are bounded and counted), then the
    oldest runs (a service is restarted without end)."""
    extra = len(attempts) - MAX_ATTEMPTS_KEPT
    if extra <= 0:
        return attempts
    kept: list[Attempt] = []
    for attempt in attempts:
        if extra > 0 and attempt.state is JobState.PENDING:
            extra -= 1
            continue
        kept.append(attempt)
    return tuple(kept[-MAX_ATTEMPTS_KEPT:])


def hold_reason(job: Job) -> str:
    """The pending reason of a held job: the server's own (NodeFailLimit) or the user's."""
    if job.reason.startswith(REASON_NODE_FAIL_LIMIT):
        return job.reason
    return REASON_HELD
