"""What the SDK answers about jobs: `Job`, a typed view of the API's JobOut, and `wait`'s errors.

`Job` is a dict (the JSON the server sent) with typed attributes: `job.state`, `job.exit_code`
for a type checker and an editor, `job["state"]` and `json.dumps(job)` as before. It is not the
pydantic JobOut itself because the CLI shares this client and must answer in ~60 ms: importing
gpuyard.schemas costs ~0.5 s (pydantic and the models). `Job.to_schema()` gives the JobOut
(validated) for whoever wants it; tests/unit/test_sdk_records.py keeps the attributes named and
typed as JobOut's fields.

    job = client.wait(client.submit(["python", "train.py"], gpus=1))  # JobFailed unless COMPLETED
    print(job.id, job.state, job.exit_code, job.node, job.gpus, job.runtime_s)
"""

from __future__ import annotations

# `typing` only for the type checker: the CLI's start path imports this module (~3 ms).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, TypeAlias

    from gpuyard.schemas.v1 import JobOut

    _Record: TypeAlias = dict[str, Any]
else:
    _Record = dict

# The ends `wait(raise_on_failure=True)` raises for: every final state but COMPLETED.
FAILED_STATES = frozenset({"FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"})


class Job(_Record):
    """One job as the server last answered it (the API's JobOut); times are ISO 8601 UTC."""

    __slots__ = ()

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={self.get(k)!r}" for k in ("id", "name", "state", "exit_code",
                                                            "reason", "node", "gpus"))  # fmt: skip
        return f"Job({shown})"

    @property
    def id(self) -> int:
        return int(self["id"])

    @property
    def name(self) -> str:
        return str(self["name"])

    @property
    def owner(self) -> str:
        return str(self["owner"])

    @property
    def state(self) -> str:
        """PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY."""
        return str(self["state"])

    @property
    def reason(self) -> str | None:
        """Why it is in its state (a pending job's wait, a failed job's cause); None: none."""
        value = self.get("reason")
        return None if value is None else str(value)

    @property
    def exit_code(self) -> int | None:
        value = self.get("exit_code")
        return None if value is None else int(value)

    @property
    def command(self) -> list[str]:
        return list(self["command"])

    @property
    def gpus(self) -> list[int]:
        """Indices of the GPUs the job holds or held (on `node`)."""
        return list(self.get("gpus") or [])

    @property
    def num_gpus(self) -> int:
        return int(self.get("num_gpus") or 0)

    @property
    def node(self) -> str:
        """Where it runs or last ran; empty before its first start."""
        return str(self.get("node") or "")

    @property
    def workdir(self) -> str:
        return str(self["workdir"])

    @property
    def submitted_at(self) -> str:
        return str(self["submitted_at"])

    @property
    def started_at(self) -> str | None:
        return self.get("started_at")

    @property
    def ended_at(self) -> str | None:
        return self.get("ended_at")

    @property
    def runtime_s(self) -> float | None:
        value = self.get("runtime_s")
        return None if value is None else float(value)

    @property
    def time_limit_s(self) -> int | None:
        value = self.get("time_limit_s")
        return None if value is None else int(value)

    @property
    def log_path(self) -> str:
        return str(self.get("log_path") or "")

    @property
    def restarts(self) -> int:
        return int(self.get("restarts") or 0)

    @property
    def array_job_id(self) -> int | None:
        value = self.get("array_job_id")
        return None if value is None else int(value)

    @property
    def array_task_id(self) -> int | None:
        value = self.get("array_task_id")
        return None if value is None else int(value)

    @property
    def ended(self) -> bool:
        """In a final state: COMPLETED or one of FAILED_STATES."""
        return self.state == "COMPLETED" or self.state in FAILED_STATES

    @property
    def ok(self) -> bool:
        """Ended COMPLETED (exit 0)."""
        return self.state == "COMPLETED"

    def to_schema(self) -> JobOut:
        """The API's own pydantic model of this record, validated (imports pydantic: ~0.5 s)."""
        from gpuyard.schemas.v1 import JobOut

        return JobOut.model_validate(dict(self))


def job_of(record: Any) -> Job:
    return record if type(record) is Job else Job(record)


def jobs_of(records: Sequence[Any]) -> list[Job]:
    return [job_of(record) for record in records]


class JobFailed(Exception):
    """A waited-for job ended other than COMPLETED: `job` (its final record), `state`,
    `reason`, `exit_code`; `jobs`: every waited-for job's final record, in the order asked."""

    def __init__(self, job: Job, jobs: Sequence[Job] = ()) -> None:
        self.job = job
        self.jobs = list(jobs) or [job]
        self.state = job.state
        self.reason = job.reason
        self.exit_code = job.exit_code
        others = sum(1 for j in self.jobs if not j.ok) - 1
        more = f" (and {others} other job(s) that did not complete)" if others > 0 else ""
        super().__init__(
            f"job {job.id} ({job.name}) ended {job.state}: {_cause(job)}{more}; its output: "
            f"`gpuyard logs {job.id}`, or wait(..., raise_on_failure=False) to get the records"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.job, self.jobs))


class WaitTimeout(TimeoutError):
    """`wait(timeout=...)` ran out before every job ended: `jobs`, those still pending or
    running (their latest records). The jobs themselves run on."""

    def __init__(self, jobs: Sequence[Job], timeout_s: float) -> None:
        self.jobs = list(jobs)
        self.timeout_s = timeout_s
        first = self.jobs[0]
        more = f" and {len(self.jobs) - 1} more" if len(self.jobs) > 1 else ""
        super().__init__(
            f"job {first.id} still {first.state}{more} after {timeout_s:g} s (wait's timeout); "
            f"the jobs run on: wait again, or cancel them (`gpuyard cancel {first.id}`)"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.jobs, self.timeout_s))


def _cause(job: Job) -> str:
    said = job.reason or "no reason given"
    if job.exit_code not in (None, 0) and str(job.exit_code) not in said:
        said += f", exit code {job.exit_code}"
    return said
