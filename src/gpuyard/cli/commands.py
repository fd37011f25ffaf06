"""The hot commands' bodies (submit, queue, show, cancel), shared by the fast start path and typer.

Both paths parse the same options into the same values and call these, so a command does and
prints the same whichever path ran it. Each returns the exit status. Standard library only, and
only what the command needs is imported, inside it.
"""

from __future__ import annotations

import sys

# `typing` and `dataclasses` only for the type checker: they would cost this path ~12 ms.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from gpuyard.client import Client


class SubmitOptions:
    """`gpuyard submit`'s options, as typed (defaults: typer's)."""

    def __init__(
        self, command: list[str] | None = None, *, gpus: int = 0, cpus: int = 1,
        mem: str | None = None, time: str | None = None, name: str | None = None,
        priority: int = 0, workdir: str | None = None, env: list[str] | None = None,
        export_env: bool = True, preemptible: bool | None = None,
        stop_signal: str | None = None, distributed: str | None = None,
        gpu_mem: str | None = None, nodes: int = 1, gpus_per_node: int | None = None,
        dry_run: bool = False, check: bool = False, retries: int = 0,
        retry_on: str | None = None,
    ) -> None:  # fmt: skip
        self.command = command or []
        self.gpus, self.cpus, self.mem, self.time, self.name = gpus, cpus, mem, time, name
        self.priority, self.workdir, self.env = priority, workdir, env or []
        self.export_env, self.preemptible, self.distributed = export_env, preemptible, distributed
        self.stop_signal = stop_signal
        self.gpu_mem, self.nodes, self.gpus_per_node = gpu_mem, nodes, gpus_per_node
        self.dry_run, self.check = dry_run, check
        self.retries, self.retry_on = retries, retry_on


def client() -> Client:
    from gpuyard.client import Client

    return Client()


def print_json(data: object) -> None:
    import json

    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def submit(opts: SubmitOptions) -> int:
    """Queue a job and print its id alone (or, with --dry-run, when it would start)."""
    from gpuyard.cli.submitting import build_submission, retry_fields, signal_fields

    problem = usage_problem(opts)
    if problem:
        sys.stderr.write(f"gpuyard: {problem}\n")
        return 2

    argv, fields = build_submission(opts.command, opts.name, opts.workdir, opts.env,
                                    opts.export_env)  # fmt: skip
    # --gpu-mem without --gpus means one GPU: the server decides that (domain/spec_rules.py).
    fields.update(gpus=opts.gpus, cpus=opts.cpus, mem=opts.mem, time_limit=opts.time,
                  priority=opts.priority)  # fmt: skip
    if opts.preemptible is not None:  # else the server's default decides
        fields["preemptible"] = opts.preemptible
    if opts.stop_signal is not None:  # SIG: the stop signal; SIG@SECONDS: a warning before
        fields.update(signal_fields(opts.stop_signal))  # the time limit
    fields.update(retry_fields(opts.retries, opts.retry_on))
    if opts.distributed:
        fields["distributed"] = opts.distributed
    if opts.gpu_mem is not None:
        fields["gpu_mem"] = opts.gpu_mem
    if opts.nodes > 1:
        fields["nodes"] = opts.nodes
    if opts.gpus_per_node is not None:
        fields["gpus"] = opts.nodes * opts.gpus_per_node
    if opts.check:
        from gpuyard.cli.doctoring import check_submission
        from gpuyard.domain.spec_rules import implied_gpus

        gpus = implied_gpus(fields["gpus"], shares_gpus=bool(opts.gpu_mem))
        check_submission(argv, {**fields, "gpus": gpus})
    if opts.dry_run:
        from gpuyard.cli.render import dry_run_answer

        sys.stdout.write(dry_run_answer(client().dry_run(argv, **fields)) + "\n")
        return 0
    session = client()
    job = session.submit(argv, on_retry=_say_retrying(session), **fields)
    sys.stdout.write(f"{job['id']}\n")
    if job.get("hint"):
        sys.stderr.write(f"gpuyard: hint: {job['hint']}\n")
    return 0


def _say_retrying(session: Client) -> Callable[[object], None]:
    """Says once, on stderr, that the submit is being tried again (the same Idempotency-Key:
    never a second job), so a wait for a restarting server is not a silent hang."""
    said: list[bool] = []

    def say(_error: object) -> None:
        if not said:
            said.append(True)
            sys.stderr.write(
                f"gpuyard: no answer from the server at {session.url}; trying again for up "
                f"to {session.submit_retry_s:g} s (the same job, never a second one)\n"
            )

    return say


def usage_problem(opts: SubmitOptions) -> str | None:
    """What no server need see to refuse: a line that cannot mean what was typed (exit 2)."""
    if opts.command[:1] == ["-"]:
        return ("`-` (a script on standard input, as sbatch reads it) is not supported: give a "
                "script file, or a command after --")  # fmt: skip
    per_node = opts.gpus_per_node
    if per_node is not None and opts.gpus and opts.gpus != opts.nodes * per_node:
        return (f"--gpus {opts.gpus} and --gpus-per-node {per_node} x --nodes {opts.nodes} "
                "disagree: give one of them")  # fmt: skip
    return None


def queue(
    all: bool,
    json_out: bool,
    page: HistoryPage | None = None,
    fmt: str | None = None,
    sort: str | None = None,
) -> int:
    """Pending and running jobs (and a page of finished ones with `all`), maybe filtered,
    sorted (`sort`) and laid out (`fmt`) in squeue's style (cli/queue_format.py)."""
    page = page or HistoryPage()
    session = client()
    user = page.user
    if page.me:
        if user is not None:
            from gpuyard.domain.errors import InvalidRequest

            raise InvalidRequest("--me and --user both name a user: give one of them")
        user = session.whoami()["user"]  # the account the token acts as
    jobs = session.jobs(
        all=all, limit=page.limit, before_id=page.before_id, since=page.since,
        states=page.states, user=user, name=page.name,
    )  # fmt: skip
    if sort or fmt:
        from gpuyard.cli.queue_format import format_jobs, sort_jobs

        jobs = sort_jobs(jobs, sort) if sort else jobs
        if fmt and not json_out:
            sys.stdout.write(format_jobs(jobs, fmt) + "\n")
            return 0
    if json_out:
        print_json(jobs)
        return 0
    from gpuyard.cli.render import queue_rows

    sys.stdout.write(queue_rows(jobs) + "\n")
    if all and page.limit is not None and len(jobs) >= page.limit and jobs:
        sys.stderr.write(f"gpuyard: more: add --before {jobs[0]['id']} for older jobs\n")
    return 0


class HistoryPage:
    """`queue`'s filters and page of history (None: not given)."""

    def __init__(
        self,
        limit: int | None = None,
        before_id: int | None = None,
        since: float | None = None,
        states: tuple[str, ...] = (),
        user: str | None = None,
        name: str | None = None,
        me: bool = False,
    ) -> None:
        self.limit, self.before_id, self.since = limit, before_id, since
        self.states, self.user, self.name, self.me = states, user, name, me


def show(job_id: int, json_out: bool) -> int:
    """Everything about one job."""
    job = client().job(job_id)
    if json_out:
        print_json(job)
        return 0
    from gpuyard.cli.render import job_record

    sys.stdout.write(job_record(job) + "\n")
    return 0


def cancel(job_ids: list[int], signal: str | None = None) -> int:
    """Cancel each job; one line per job that could not be, and exit 1 if any. `signal`: what
    running jobs' processes get instead of their own stop signal (`--signal`)."""
    from gpuyard.client import ServerUnreachable
    from gpuyard.domain.errors import GpuyardError

    session = client()
    failed = False
    for job_id in job_ids:
        try:
            session.cancel(job_id, signal)
        except ServerUnreachable:
            raise
        except GpuyardError as exc:
            sys.stderr.write(f"gpuyard: {exc.message}\n")
            failed = True
    return 1 if failed else 0
