"""`gpuyard top`: the GPUs and running jobs, redrawn every interval (rich Live).

Only this command imports rich: the other commands stay fast to start.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from gpuyard.cli.progress_format import progress_count, progress_fraction
from gpuyard.cli.render import NA, bar, gpu_notes, printable
from gpuyard.domain.units import format_duration, format_size_mib

if TYPE_CHECKING:
    from rich.console import RenderableType

    from gpuyard.client import Client


# Running jobs whose progress is asked each frame (one request each): more would not fit a
# terminal anyway, and a frame stays a few dozen requests.
PROGRESS_JOBS = 40


def run_top(client: Client, interval_s: float, iterations: int | None) -> None:
    """Redraw until Ctrl-C, or `iterations` frames."""
    from rich.console import Console
    from rich.live import Live

    console = Console()
    shown = 1
    progress = ProgressSource(client)
    with Live(_frame(client, progress), console=console, auto_refresh=False) as live:
        try:
            while iterations is None or shown < iterations:
                time.sleep(interval_s)
                live.update(_frame(client, progress), refresh=True)
                shown += 1
        except KeyboardInterrupt:
            pass


class ProgressSource:
    """Each running job's progress, asked each frame; never again once the server has
    answered that it has no progress route (an older server: the column stays `-`)."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.route = True

    def of(self, jobs: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
        from gpuyard.domain.errors import NotFound

        found: dict[int, dict[str, Any]] = {}
        for job in jobs[:PROGRESS_JOBS]:
            if not self.route:
                break
            try:
                progress = self.client.progress(job["id"])
            except NotFound:  # it ended and was cleaned since the list
                continue
            if progress is None:
                self.route = False
            else:
                found[job["id"]] = progress
        return found


def _frame(client: Client, progress: ProgressSource | None = None) -> RenderableType:
    from rich.console import Group
    from rich.text import Text

    gpus = client.gpus()
    running = [job for job in client.jobs() if job["state"] == "RUNNING"]
    reports = (progress or ProgressSource(client)).of(running)
    title = Text(f"gpuyard top  {time.strftime('%H:%M:%S')}  {client.url}", style="bold")
    parts: list[RenderableType] = [title, _gpu_table(gpus) if gpus else Text("no GPUs")]
    for g in gpus:
        for note in gpu_notes(g):
            style = "red" if note.startswith("!") else "dim"
            parts.append(Text(f"  GPU {g['index']}: {printable(note)}", style=style))
    parts.append(_job_table(running, reports) if running else Text("no running jobs"))
    return Group(*parts)


def _level(pct: float | None) -> str:
    if pct is None:
        return "dim"
    return "red" if pct >= 90 else "yellow" if pct >= 50 else "green"


def _gpu_table(gpus: list[dict[str, Any]]) -> RenderableType:
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("GPU", "NAME", "UTIL", "MEMORY", "TEMP", "POWER", "SM", "JOB", "SOURCE"):
        table.add_column(column, no_wrap=True)
    for g in gpus:
        util, used, total = g.get("util_pct"), g.get("memory_used_mib"), g.get("memory_total_mib")
        mem_pct = 100 * used / total if used is not None and total else None
        memory = NA if used is None else f"{used / 1024:.1f}/{(total or 0) / 1024:.1f}G"
        table.add_row(
            str(g["index"]),
            Text(printable(g["name"])),  # never markup, never a raw control character
            Text(f"{bar(util)} {NA if util is None else f'{util}%':>4}", style=_level(util)),
            Text(f"{bar(mem_pct)} {memory}", style=_level(mem_pct)),
            NA if g.get("temperature_c") is None else f"{g['temperature_c']}C",
            _power(g),
            NA if g.get("sm_clock_mhz") is None else f"{g['sm_clock_mhz']}MHz",
            "-" if g["job"] is None else f"{g['job']} {g.get('user') or ''}",
            "detected" if g["detected"] else "declared",
        )
    return table


def _power(g: dict[str, Any]) -> str:
    draw, limit = g.get("power_w"), g.get("power_limit_w")
    if draw is None:
        return NA
    return f"{draw:.0f}W" if limit is None else f"{draw:.0f}/{limit:.0f}W"


def _job_table(
    jobs: list[dict[str, Any]], reports: dict[int, dict[str, Any]] | None = None
) -> RenderableType:
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, pad_edge=False, header_style="bold", title_justify="left")
    columns = ("JOBID", "NAME", "USER", "GPU_IDS", "TIME", "GPU_UTIL", "GPU_MEM_PEAK", "PROGRESS")
    for column in columns:
        table.add_column(column, no_wrap=True)
    for job in jobs:
        stats = job.get("gpu_stats") or {}
        mean, peak = stats.get("util_mean_pct"), stats.get("memory_peak_mib")
        table.add_row(
            str(job["id"]),
            Text(printable(job["name"])),  # never markup, never a raw control character
            Text(printable(job["owner"])),
            ",".join(map(str, job["gpus"])) or "-",
            format_duration(job["runtime_s"]),
            NA if mean is None else f"{mean:.0f}%",
            NA if peak is None else format_size_mib(peak),
            progress_cell((reports or {}).get(job["id"])),
        )
    return table


def progress_cell(progress: dict[str, Any] | None) -> str:
    """`████░░░░░░  45% ETA 2:51`, `step 450` without a total, `-` without progress."""
    if not progress or progress.get("step") is None:
        return "-"
    if not progress.get("total"):
        return progress_count(progress)
    pct = 100 * progress_fraction(progress)
    eta = progress.get("eta_s")
    return f"{bar(pct)} {pct:3.0f}%" + ("" if eta is None else f" ETA {format_duration(eta)}")
