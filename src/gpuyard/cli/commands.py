"""The hot commands' bodies (submit, queue, show, cancel), shared by the fast start path and typer.

Both paths parse the same options into the same values and call these, so a command does and
prints the same whichever path ran it. Each returns the exit status. Standard library only, and
only what the command needs is imported, inside it.
"""

from __future__ import annotations

import sys

from gpuyard.cli.session import client

# `typing` and `dataclasses` only for the type checker: they would cost this path ~12 ms.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from gpuyard.cli.job_refs import Resolved
    from gpuyard.client import Client

    JobDict = dict[str, Any]


class SubmitOptions:
    """`gpuyard submit`'s options, as typed (defaults: typer's; None: not given, so a script's
    directive or the server's default decides)."""

    def __init__(
        self, command: list[str] | None = None, *, gpus: int | None = None,
        cpus: int | None = None, mem: str | None = None, time: str | None = None,
        name: str | None = None, priority: int | None = None, workdir: str | None = None,
        env: list[str] | None = None, export_env: bool | None = None,
        preemptible: bool | None = None, stop_signal: str | None = None,
        distributed: str | None = None, gpu_mem: str | None = None, nodes: int | None = None,
        gpus_per_node: int | None = None, dry_run: bool = False, json: bool = False,
        check: bool = False,
        retries: int = 0, retry_on: str | None = None, output: str | None = None,
        error: str | None = None, gres: str | None = None,
        ntasks_per_node: int | None = None, mem_per_gpu: str | None = None,
        array: str | None = None, dependency: str | None = None, export: str | None = None,
        mail_type: str | None = None, mail_user: str | None = None,
        notify: list[str] | None = None, python: str | None = None, venv: str | None = None,
        container: str | None = None, gpu_type: str | None = None,
        gpus_per_task: str | None = None,
    ) -> None:  # fmt: skip
        self.command = command or []
        self.gpus, self.cpus, self.mem, self.time, self.name = gpus, cpus, mem, time, name
        self.priority, self.workdir, self.env = priority, workdir, env or []
        self.export_env, self.preemptible, self.distributed = export_env, preemptible, distributed
        self.stop_signal = stop_signal
        self.gpu_mem, self.nodes, self.gpus_per_node = gpu_mem, nodes, gpus_per_node
        self.dry_run, self.json, self.check = dry_run, json, check
        self.retries, self.retry_on = retries, retry_on
        self.output, self.error, self.gres = output, error, gres
        self.ntasks_per_node, self.mem_per_gpu = ntasks_per_node, mem_per_gpu
        self.array, self.dependency, self.export = array, dependency, export
        self.mail_type, self.mail_user, self.notify = mail_type, mail_user, notify or []
        self.python, self.venv, self.container = python, venv, container
        self.gpu_type, self.gpus_per_task = gpu_type, gpus_per_task
        # `gpuyard sbatch`: "sbatch" prints `Submitted batch job N`, "parsable" N; its
        # defaults (`-o slurm-%j.out`, `--export=ALL`) go under the script's directives.
        self.style = "id"
        self.defaults: dict[str, object] = {}
        self.slurm_values: dict[str, object] = {}  # sbatch's options submit has no flag for
        # sbatch's --wait (block, exit with the job's code) and --test-only (when it would
        # start, nothing queued): set from the flags and the script's directives (apply_batch).
        self.sbatch_wait = False
        self.test_only = False


def print_json(data: object) -> None:
    import json

    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def submit(opts: SubmitOptions) -> int:
    """Queue a job and print its id alone (or, with --dry-run, when it would start)."""
    from gpuyard.cli.submitting import (
        apply_batch,
        build_submission,
        retry_fields,
        signal_fields,
    )

    problem = usage_problem(opts)
    if problem:
        sys.stderr.write(f"gpuyard: {problem}\n")
        return 2

    argv, fields = build_submission(opts.command, opts.name, opts.workdir, opts.env,
                                    opts.export_env is not False)  # fmt: skip
    # The script's #SBATCH/#GPUYARD directives, the flags over them (domain/sbatch.py):
    # gpus, cpus, mem, time_limit, priority... (--gpu-mem without --gpus means one GPU: the
    # server decides that, domain/spec_rules.py).
    apply_batch(opts, argv, fields, opts.defaults)
    if opts.stop_signal is not None and opts.style == "id":  # SIG: the stop signal;
        fields.update(signal_fields(opts.stop_signal))  # SIG@SECONDS: a warning before the limit
    fields.update(retry_fields(opts.retries, opts.retry_on))
    if opts.check:
        from gpuyard.cli.doctoring import check_submission
        from gpuyard.domain.spec_rules import implied_gpus

        gpus = implied_gpus(fields["gpus"], shares_gpus=bool(fields.get("gpu_mem")))
        check_submission(argv, {**fields, "gpus": gpus})
    sbatch_style = opts.style != "id"
    if not sbatch_style and (opts.sbatch_wait or opts.test_only):
        sys.stderr.write("gpuyard: warning: the script's --wait/--test-only are sbatch's: "
                         "use gpuyard sbatch, or gpuyard wait / submit --dry-run\n")  # fmt: skip
    if sbatch_style and opts.test_only:
        from gpuyard.cli.render import test_only_line

        answer = client().dry_run(argv, **fields)
        sys.stderr.write(test_only_line(answer, fields) + "\n")
        return 0
    if opts.dry_run:
        from gpuyard.cli.render import dry_run_answer

        answer = client().dry_run(argv, **fields)
        if opts.json:
            print_json(answer)
        else:
            sys.stdout.write(dry_run_answer(answer) + "\n")
        return 0
    session = client()
    job = session.submit(argv, **fields)
    if opts.json:  # the record as `show --json` prints it (an array's: its first task's)
        print_json(job)
    else:  # an array's id (its first task's, %A) alone: what `wait`, `cancel` and `show` take
        job_id = job.get("array_job_id") or job["id"]
        sys.stdout.write(
            f"Submitted batch job {job_id}\n" if opts.style == "sbatch" else f"{job_id}\n"
        )
    hint = job.get("hint") or ""
    if sbatch_style:  # Slurm's sbatch says nothing of its default memory (`show` does)
        from gpuyard.domain.machine_share import DEFAULT_MEM_HINT

        hint = "; ".join(h for h in hint.split("; ") if not h.startswith(DEFAULT_MEM_HINT))
    if hint:
        sys.stderr.write(f"gpuyard: hint: {hint}\n")
    if sbatch_style and opts.sbatch_wait:
        sys.stdout.flush()
        return _wait_exit_code(session, job)
    return 0


def _wait_exit_code(session: Client, job: JobDict) -> int:
    """sbatch --wait's exit: blocks until the job (an array: every task) ends; the job's exit
    code, an array's highest; 1 for a job that ended without one that is not 0 (cancelled,
    killed by a signal, never started)."""
    if job.get("array_job_id"):
        ids = [int(task["id"]) for task in session.array(int(job["array_job_id"]))]
    else:
        ids = [int(job["id"])]
    codes = []
    for ended in session.wait(ids, raise_on_failure=False):
        code = ended.get("exit_code")
        if ended["state"] == "COMPLETED":
            codes.append(0)
        else:
            codes.append(code if isinstance(code, int) and code > 0 else 1)
    return max(codes)


def usage_problem(opts: SubmitOptions) -> str | None:
    """What no server need see to refuse: a line that cannot mean what was typed (exit 2)."""
    if opts.command[:1] == ["-"]:
        return ("`-` (a script on standard input, as sbatch reads it) is not supported: give a "
                "script file, or a command after --")  # fmt: skip
    per_node, nodes = opts.gpus_per_node, opts.nodes or 1
    if per_node is not None and opts.gpus and opts.gpus != nodes * per_node:
        return (f"--gpus {opts.gpus} and --gpus-per-node {per_node} x --nodes {nodes} "
                "disagree: give one of them")  # fmt: skip
    return None


def queue(
    all: bool,
    json_out: bool,
    page: HistoryPage | None = None,
    fmt: str | None = None,
    sort: str | None = None,
    expand: bool = False,
) -> int:
    """Pending and running jobs (and a page of finished ones with `all`), maybe filtered,
    sorted (`sort`) and laid out (`fmt`) in squeue's style (cli/queue_format.py). An array's
    pending tasks are one line (`12_[3-99%8]`), each running task its own (`12_0`); `expand`
    (`--array`): a line per task. JSON is always a record per job."""
    page = page or HistoryPage()
    session = client()
    user = page.user
    if page.me:
        if user is not None:
            from gpuyard.domain.errors import InvalidRequest

            raise InvalidRequest("--me and --user both name a user: give one of them")
        user = session.whoami()["user"]  # the account the token acts as
    limit = HISTORY_PAGE if all and page.limit is None else page.limit
    jobs: Sequence[JobDict] = session.jobs(
        all=all, limit=limit, before_id=page.before_id, since=page.since,
        states=page.states, user=user, name=page.name,
    )  # fmt: skip
    table = _write_jobs(jobs, json_out, fmt, sort, expand)
    if all and limit is not None and jobs and len(jobs) >= limit:  # JSON's too, on stderr
        oldest = min(int(job["id"]) for job in jobs)
        sys.stderr.write(f"gpuyard: more: add --before {oldest} for older jobs\n")
    if table and page.states and not all:
        _hint_finished(page.states)
    return 0


def _write_jobs(
    jobs: Sequence[JobDict], json_out: bool, fmt: str | None, sort: str | None, expand: bool
) -> bool:
    """`queue`'s output: JSON, squeue's `--format`, or the table (True)."""
    if sort or fmt:
        from gpuyard.cli.queue_format import format_jobs, sort_jobs

        jobs = sort_jobs(jobs, sort) if sort else jobs
        if fmt and not json_out:
            sys.stdout.write(format_jobs(_folded(jobs, expand), fmt) + "\n")
            return False
    if json_out:
        print_json(jobs)
        return False
    from gpuyard.cli.render import queue_rows

    sys.stdout.write(queue_rows(_folded(jobs, expand)) + "\n")
    return True


def _hint_finished(states: tuple[str, ...]) -> None:
    """`queue -t COMPLETED` lists pending and running jobs only: say where finished ones are."""
    from gpuyard.domain.states import TERMINAL_STATES

    ended = [state for state in states if state in {s.value for s in TERMINAL_STATES}]
    if ended:
        sys.stderr.write(
            f"gpuyard: hint: {', '.join(ended)} jobs have ended, and the queue lists pending "
            "and running ones: add --all for the finished\n"
        )


def _folded(jobs: Sequence[JobDict], expand: bool) -> Sequence[JobDict]:
    """Arrays folded as squeue shows them, unless `expand`; jobs of no array as they are."""
    if expand or not any(job.get("array_job_id") is not None for job in jobs):
        return jobs
    from gpuyard.cli.queue_format import fold_arrays

    return fold_arrays(jobs)


# `queue --all` without --limit: the newest jobs of history, a terminal's worth. The whole
# page the server allows (10,000) cost ~1.3 s of the server's CPU per request with 20,000
# finished jobs and, under 50 clients, held every other request seconds behind it (issue 27,
# docs/benchmarks.md "Mixed load from 50 clients"); older pages are a `--before` away.
HISTORY_PAGE = 200


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


def show(ref: str, json_out: bool) -> int:
    """Everything about one job; with its progress and sparklines once it has run. `ref` an
    array's id (or `12_[1-3]`): a summary of its tasks by state and their table (JSON: the
    tasks' records); `12_3`: that task."""
    session = client()
    job: JobDict
    if ref.isdigit():  # the usual case: one request, unless it is an array's id
        job = session.job(int(ref))
        from gpuyard.cli.job_refs import is_array_head

        if is_array_head(job):
            return _show_tasks(session.array(int(job["id"])), json_out)
    else:
        from gpuyard.cli.job_refs import resolve

        named = resolve(session, ref)
        if named.tasks is not None:
            return _show_tasks(named.tasks, json_out)
        assert named.job is not None
        job = named.job
    if json_out:
        print_json(job)
        return 0
    from gpuyard.cli.render import job_record

    charts = _charts(session, job) if job.get("started_at") else []
    sys.stdout.write(job_record(job, charts) + "\n")
    return 0


def _show_tasks(tasks: Sequence[JobDict], json_out: bool) -> int:
    if json_out:
        print_json(tasks)
        return 0
    from gpuyard.cli.queue_format import array_summary
    from gpuyard.cli.render import queue_rows

    sys.stdout.write(array_summary(tasks) + "\n\n" + queue_rows(tasks) + "\n")
    return 0


# Points asked of the server per chart: a few per sparkline cell, so each cell is a mean.
_CHART_POINTS = 160


def _charts(session: Client, job: dict[str, object]) -> list[tuple[str, object]]:
    """`show`'s progress line and sparklines: one request for the progress, one for the
    metric's series when it reported metrics, one for GPU history when it holds GPUs (a job
    that never started asks nothing: `show` of a pending job stays one request)."""
    from gpuyard.cli.progress_format import chart_fields, chart_metric
    from gpuyard.domain.errors import NotFound

    job_id = int(str(job["id"]))
    try:
        progress = session.progress(job_id)
        metric = chart_metric(progress)
        series = session.series(job_id, [metric], _CHART_POINTS) if metric else None
        history = session.job_gpu_history(job_id, _CHART_POINTS) if job.get("num_gpus") else None
    except NotFound:  # cleaned between two requests: the record is what there is
        return []
    return chart_fields(progress, metric, series, history)


def wait(refs: list[str], quiet: bool = False) -> int:
    """Block until the jobs end; exit 0 only if all COMPLETED (an array: every task; its worst
    task decides). On a terminal (stderr), a progress bar per job until then (cli/live.py);
    piped or `quiet`, nothing but the lines of the jobs that did not complete, as always."""
    from gpuyard.cli.job_refs import label, resolve
    from gpuyard.cli.live import wants_live

    session = client()
    named = [resolve(session, ref) for ref in refs]
    job_ids = list(dict.fromkeys(int(job["id"]) for one in named for job in one.jobs()))
    jobs: Sequence[JobDict]
    if any(one.tasks is not None for one in named):
        jobs = _wait_arrays(session, named)  # an array's tasks: one request per array a round
    elif wants_live(quiet):
        from gpuyard.cli.live import wait_live

        jobs = wait_live(session, job_ids)
    else:
        jobs = session.wait(job_ids, raise_on_failure=False)
    bad = [j for j in jobs if j["state"] != "COMPLETED"]
    for job in bad:
        sys.stderr.write(f"gpuyard: job {label(job)} {job['state']}: {job['reason'] or 'None'}\n")
    return 1 if bad else 0


def _wait_arrays(session: Client, named: list[Resolved], poll_s: float = 0.5) -> list[JobDict]:
    """The final records of every job `named`, each array's tasks read in one request. A large
    array's read costs the server time: the next round waits at least twice as long as this
    one's reads took (10,000 tasks: about a round a second, never a busy server)."""
    import time

    from gpuyard.domain.states import TERMINAL_STATES

    ended = {state.value for state in TERMINAL_STATES}
    done: dict[int, JobDict] = {}
    while True:
        began = time.monotonic()
        waiting = False
        for one in named:
            wanted = [int(job["id"]) for job in one.jobs() if int(job["id"]) not in done]
            if not wanted:
                continue
            if one.array_id is not None and len(wanted) > 1:
                jobs = [j for j in session.array(one.array_id) if int(j["id"]) in wanted]
            else:
                jobs = [session.job(job_id) for job_id in wanted]
            for job in jobs:
                if job["state"] in ended:
                    done[int(job["id"])] = job
                else:
                    waiting = True
        if not waiting:
            break
        time.sleep(max(poll_s, 2 * (time.monotonic() - began)))
    ordered = [int(job["id"]) for one in named for job in one.jobs()]
    return [done[job_id] for job_id in dict.fromkeys(ordered)]


def logs(
    ref: str, follow: bool, tail: int | None, quiet: bool = False, *, rendered: bool = False
) -> int:
    """The output of the job `ref` names (12, or an array's task 12_3) on stdout, as its bytes
    are (`rendered`: as a terminal shows them, cli/log_frames.py). With `follow` on a terminal
    (stderr), a progress bar under it while it runs (cli/live.py); piped or `quiet`, the bytes
    alone."""
    from gpuyard.cli.job_refs import one_id
    from gpuyard.cli.log_frames import RenderedStream

    session = client()
    job_id = one_id(session, ref)
    out = sys.stdout.buffer
    frames = RenderedStream() if rendered else None
    if not follow:
        for chunk in session.log_chunks(job_id, tail=tail):
            out.write(frames.feed(chunk) if frames else chunk)
        out.write(frames.end() if frames else b"")
        return 0
    from gpuyard.cli.live import wants_live

    if wants_live(quiet) and frames is None:
        from gpuyard.cli.live import follow_live

        follow_live(session, job_id, tail, on_lost=_following_lost)
        return 0
    for chunk in session.follow_log(job_id, tail=tail, on_lost=_following_lost):
        out.write(frames.feed(chunk) if frames else chunk)
        out.flush()
    out.write(frames.end() if frames else b"")
    return 0


def _following_lost() -> None:
    sys.stderr.write("gpuyard: the server went away; following again once it is back\n")


def cancel(refs: list[str], signal: str | None = None) -> int:
    """Cancel each job; one line per job that could not be, and exit 1 if any. `signal`: what
    running jobs' processes get instead of their own stop signal (`--signal`). An array's id
    cancels the whole array (as scancel), `12_3` one task, `12_[1-3]` those tasks. Every job
    goes in one request (`POST /api/v1/jobs/cancel`), tasks named by a range in a second."""
    from gpuyard.cli.job_refs import resolve
    from gpuyard.client import ServerUnreachable
    from gpuyard.domain.errors import GpuyardError

    session = client()
    failed = False
    whole = [int(ref) for ref in refs if ref.isdigit()]
    tasks: list[int] = []
    in_ranges: set[int] = set()  # tasks of a range: one that ended meanwhile is no failure
    for ref in refs:
        if ref.isdigit():
            continue
        try:
            named = resolve(session, ref)
        except ServerUnreachable:
            raise
        except GpuyardError as exc:
            sys.stderr.write(f"gpuyard: {exc.message}\n")
            failed = True
            continue
        if named.tasks is None:  # one task: cancelled as a job, its errors said
            assert named.job is not None
            tasks.append(int(named.job["id"]))
            continue
        active = [int(t["id"]) for t in named.tasks if t["state"] in ("PENDING", "RUNNING")]
        tasks += active
        in_ranges.update(active)
    for ids, whole_arrays in ((whole, True), (tasks, False)):
        for at in range(0, len(ids), _CANCEL_BATCH):
            try:
                done = session.cancel_many(
                    ids[at : at + _CANCEL_BATCH], signal, whole_arrays=whole_arrays
                )
            except ServerUnreachable:
                raise
            except GpuyardError as exc:
                sys.stderr.write(f"gpuyard: {exc.message}\n")
                failed = True
                continue
            for refused in done["refused"]:
                if refused["id"] in in_ranges and refused["code"] == "conflict":
                    continue
                sys.stderr.write(f"gpuyard: {refused['message']}\n")
                failed = True
    return 1 if failed else 0


# Ids per bulk cancel request (the server takes up to 100,000).
_CANCEL_BATCH = 50_000
