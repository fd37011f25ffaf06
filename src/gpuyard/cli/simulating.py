"""`gpuyard simulate`: replay a trace under one or more policies and print their figures.

The table goes to stdout, one row per policy; the progress bar (only on a terminal) to stderr,
so `gpuyard simulate ... > table.txt` and `--json | jq` stay clean.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from gpuyard.cli.render import table
from gpuyard.domain.errors import InvalidRequest
from gpuyard.scheduling.policies import ORACLES
from gpuyard.simulation.engine import Explained
from gpuyard.simulation.metrics import PolicyReport
from gpuyard.simulation.replay import Progress, default_policy, simulate

HEADERS = ("POLICY", "JOBS", "JCT_AVG_H", "JCT_P50_H", "JCT_P95_H", "JCT_P99_H", "QUEUE_AVG_H",
           "QUEUE_P99_H", "SLOWDOWN", "MAKESPAN_D", "UTIL%", "PREEMPTIONS", "JAIN")  # fmt: skip
_HOUR, _DAY = 3600.0, 86400.0


def run_simulation(
    trace: str,
    gpus: int,
    gpus_per_node: int,
    policy: str | None,
    compare: str | None,
    restart_penalty_s: float,
    json_out: bool,
    preemptible_fraction: float | None = None,
    max_gpus_per_user: int | None = None,
    time_limits: str | None = None,
    explain: int | None = None,
) -> None:
    """Replay, then print a table (or JSON Lines with `json_out`) on stdout; with `explain`,
    that job's rank and factors under each policy after the table."""
    names = policy_list(policy, compare)
    with progress_bar() as progress:
        reports = simulate(Path(trace), gpus, gpus_per_node, names, restart_penalty_s, progress,
                           preemptible_fraction, max_gpus_per_user, time_limits,
                           explain)  # fmt: skip
    if json_out:
        sys.stdout.write(json_lines(reports))
    else:
        sys.stdout.write(report_table(reports) + "\n")
        for r in reports:
            if r.explained is not None:
                sys.stdout.write("\n" + explained_text(r.policy, r.explained) + "\n")


def explained_text(policy: str, said: Explained) -> str:
    """`--explain JOB` under one policy, in `gpuyard show`'s fields (Rank, RankFactors,
    ExpectedRun) and words: where it ranked and why when it started."""
    from gpuyard.cli.render import rank_fields

    when = "when it started" if said.started else "at the end (it never started)"
    head = f"job {said.job_id} under {policy}, {when} at {said.at:,.0f} s:"
    if said.rank is None:
        return f"{head} not in the policy's queue (the gate kept it out)"
    fields = rank_fields(dict(said.rank.fields()))
    if said.expected_run:
        fields.append(("ExpectedRun", said.expected_run))
    width = max(len(k) for k, _ in fields)
    return "\n".join([head, *(f"  {k.rjust(width)}: {v}" for k, v in fields)])


def policy_list(policy: str | None, compare: str | None) -> list[str]:
    """The policies to replay, in order: `--policy`, `--compare`'s list, or the default."""
    if policy is not None and compare is not None:
        raise InvalidRequest("give --policy NAME or --compare P1,P2,..., not both")
    if compare is not None:
        names = list(dict.fromkeys(n.strip() for n in compare.split(",") if n.strip()))
        if not names:
            raise InvalidRequest("--compare needs policy names separated by commas")
        return names
    return [policy if policy is not None else default_policy()]


def json_lines(reports: Sequence[PolicyReport]) -> str:
    return "".join(json.dumps(r.to_json()) + "\n" for r in reports)


def _label(r: PolicyReport) -> str:
    notes = ["oracle"] if r.policy in ORACLES else []
    if r.time_limits == "exact" and r.policy not in ORACLES:
        notes.append("exact limits")
    if r.time_limits == "padded":
        notes.append(f"padded limits, {r.timeouts:,} timeouts" if r.timeouts else "padded limits")
    elif r.timeouts:
        notes.append(f"{r.timeouts:,} timeouts")
    if r.preemptible < 1.0:
        notes.append(f"{100 * r.preemptible:.0f}% preemptible")
    return f"{r.policy} ({', '.join(notes)})" if notes else r.policy


def report_table(reports: Sequence[PolicyReport]) -> str:
    """Policies as rows; numbers right-aligned so columns compare at a glance."""
    rows = [
        [
            _label(r),
            f"{r.jobs:,}",
            *(f"{v / _HOUR:.2f}" for v in (r.avg_jct_s, r.p50_jct_s, r.p95_jct_s, r.p99_jct_s)),
            f"{r.avg_queue_s / _HOUR:.2f}",
            f"{r.p99_queue_s / _HOUR:.2f}",
            f"{r.avg_slowdown:.2f}",
            f"{r.makespan_s / _DAY:.2f}",
            f"{100 * r.utilization:.1f}",
            f"{r.preemptions:,}",
            f"{r.fairness:.3f}",
        ]
        for r in reports
    ]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(HEADERS)]
    headers = [HEADERS[0], *(h.rjust(w) for h, w in zip(HEADERS[1:], widths[1:], strict=True))]
    aligned = [[row[0], *(c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True))]
               for row in rows]  # fmt: skip
    return table(headers, aligned)


@contextmanager
def progress_bar() -> Iterator[Progress | None]:
    """A bar per policy on stderr when it is a terminal; otherwise no progress at all."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, TaskID, TimeElapsedColumn
    from rich.progress import Progress as Bars

    bars = Bars(
        "{task.description}", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=Console(stderr=True), transient=True,
    )  # fmt: skip
    tasks: dict[str, TaskID] = {}

    def update(name: str, finished: int, total: int) -> None:
        if name not in tasks:
            tasks[name] = bars.add_task(name, total=total)
        bars.update(tasks[name], completed=finished)

    with bars:
        yield update
