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
    try:  # Ctrl-C at any moment (a frame being fetched too) ends top quietly, as top's does
        frame = _frame(client, progress, console.width)
        with Live(frame, console=console, auto_refresh=False) as live:
            while iterations is None or shown < iterations:
                time.sleep(interval_s)
                live.update(_frame(client, progress, console.width), refresh=True)
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


def _frame(
    client: Client, progress: ProgressSource | None = None, width: int | None = None
) -> RenderableType:
    """One frame; `width`: the terminal's columns, which the tables are fitted to."""
    from rich.console import Group
    from rich.text import Text

    gpus = client.gpus()
    running: list[dict[str, Any]] = [job for job in client.jobs() if job["state"] == "RUNNING"]
    reports = (progress or ProgressSource(client)).of(running)
    title = Text(f"gpuyard top  {time.strftime('%H:%M:%S')}  {client.url}", style="bold")
    parts: list[RenderableType] = [title, _gpu_table(gpus, width) if gpus else Text("no GPUs")]
    for g in gpus:
        for note in gpu_notes(g):
            style = "red" if note.startswith("!") else "dim"
            parts.append(Text(f"  GPU {g['index']}: {printable(note)}", style=style))
    parts.append(_job_table(running, reports, width) if running else Text("no running jobs"))
    return Group(*parts)


def _level(pct: float | None) -> str:
    if pct is None:
        return "dim"
    return "red" if pct >= 90 else "yellow" if pct >= 50 else "green"


# What a narrower terminal drops first, as nvitop does: each layout is tried from the widest
# until one fits; the GPU's index, utilisation, memory and temperature are in every one.
# (columns, the bars' cells (0: none), a name's and a user's characters at most (0: whole)).
_GPU_LAYOUTS: tuple[tuple[tuple[str, ...], int, int, int], ...] = (
    (("GPU", "NAME", "UTIL", "MEMORY", "TEMP", "POWER", "SM", "JOB", "SOURCE"), 10, 0, 0),
    (("GPU", "NAME", "UTIL", "MEMORY", "TEMP", "POWER", "JOB"), 10, 0, 0),
    (("GPU", "NAME", "UTIL", "MEMORY", "TEMP", "JOB"), 5, 14, 8),
    (("GPU", "NAME", "UTIL", "MEMORY", "TEMP", "JOB"), 0, 10, 0),
    (("GPU", "UTIL", "MEMORY", "TEMP", "JOB"), 0, 0, 0),
    (("GPU", "UTIL", "MEMORY", "TEMP"), 0, 0, 0),
)
_JOB_LAYOUTS: tuple[tuple[tuple[str, ...], int, int, int], ...] = (
    (("JOBID", "NAME", "USER", "GPU_IDS", "TIME", "GPU_UTIL", "GPU_MEM_PEAK", "PROGRESS"),
     10, 0, 0),
    (("JOBID", "NAME", "USER", "GPUS", "TIME", "UTIL", "PEAK", "PROGRESS"), 5, 20, 10),
    (("JOBID", "NAME", "USER", "GPUS", "TIME", "PROGRESS"), 5, 16, 8),
    (("JOBID", "NAME", "GPUS", "TIME", "PROGRESS"), 0, 12, 0),
    (("JOBID", "GPUS", "TIME", "PROGRESS"), 0, 0, 0),
)  # fmt: skip
_VENDOR_PREFIXES = ("NVIDIA ", "AMD ", "GeForce ", "Radeon ", "Instinct ")


def _short(text: str, limit: int) -> str:
    """`text` within `limit` characters (0: whole), cut with an ellipsis."""
    return text if not limit or len(text) <= limit else text[: limit - 1] + "…"


def _gpu_name(name: str, limit: int) -> str:
    """A GPU's model, its vendor's words dropped first when it must be short."""
    if limit:
        while name.startswith(_VENDOR_PREFIXES):
            name = name.split(" ", 1)[1]
    return _short(name, limit)


def _fitted(build: Any, layouts: tuple[Any, ...], width: int | None) -> RenderableType:
    """The first of `layouts` whose table fits `width` columns (None: the widest), else the
    narrowest."""
    if width is None:
        return build(*layouts[0])  # type: ignore[no-any-return]
    from io import StringIO

    from rich.console import Console
    from rich.measure import Measurement

    measuring = Console(file=StringIO(), width=10_000, color_system=None)
    for layout in layouts:
        table = build(*layout)
        if Measurement.get(measuring, measuring.options, table).maximum <= width:
            return table  # type: ignore[no-any-return]
    return table  # type: ignore[no-any-return]


def _gpu_table(gpus: list[dict[str, Any]], width: int | None = None) -> RenderableType:
    """The GPUs, one a row, with the columns that fit `width` (None: all)."""
    return _fitted(lambda *layout: _gpu_rows(gpus, *layout), _GPU_LAYOUTS, width)


def _gpu_rows(
    gpus: list[dict[str, Any]],
    columns: tuple[str, ...],
    bar_cells: int,
    name_chars: int,
    user_chars: int,
) -> RenderableType:
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column, no_wrap=True)
    for g in gpus:
        util, used, total = g.get("util_pct"), g.get("memory_used_mib"), g.get("memory_total_mib")
        mem_pct = 100 * used / total if used is not None and total else None
        memory = NA if used is None else f"{used / 1024:.1f}/{(total or 0) / 1024:.1f}G"
        user = _short(printable(g.get("user") or ""), user_chars)
        job = "-" if g["job"] is None else f"{g['job']} {user}".strip()
        cells: dict[str, str | Text] = {
            "GPU": str(g["index"]),
            # never markup, never a raw control character
            "NAME": Text(_gpu_name(printable(g["name"]), name_chars)),
            "UTIL": Text(
                f"{_drawn(util, bar_cells)}{NA if util is None else f'{util}%':>4}",
                style=_level(util),
            ),
            "MEMORY": Text(f"{_drawn(mem_pct, bar_cells)}{memory}", style=_level(mem_pct)),
            "TEMP": NA if g.get("temperature_c") is None else f"{g['temperature_c']}C",
            "POWER": _power(g),
            "SM": NA if g.get("sm_clock_mhz") is None else f"{g['sm_clock_mhz']}MHz",
            "JOB": Text(job if bar_cells else job.split(" ")[0]),  # no bars: no user either
            "SOURCE": "detected" if g["detected"] else "declared",
        }
        table.add_row(*(cells[column] for column in columns))
    return table


def _drawn(pct: float | None, cells: int) -> str:
    """A bar of `cells` and a space before a figure; nothing when there are no bars."""
    return bar(pct, cells) + " " if cells else ""


def _power(g: dict[str, Any]) -> str:
    draw, limit = g.get("power_w"), g.get("power_limit_w")
    if draw is None:
        return NA
    return f"{draw:.0f}W" if limit is None else f"{draw:.0f}/{limit:.0f}W"


def _job_table(
    jobs: list[dict[str, Any]],
    reports: dict[int, dict[str, Any]] | None = None,
    width: int | None = None,
) -> RenderableType:
    """The running jobs, one a row, with the columns that fit `width` (None: all)."""
    return _fitted(lambda *layout: _job_rows(jobs, reports or {}, *layout), _JOB_LAYOUTS, width)


def _job_rows(
    jobs: list[dict[str, Any]],
    reports: dict[int, dict[str, Any]],
    columns: tuple[str, ...],
    bar_cells: int,
    name_chars: int,
    user_chars: int,
) -> RenderableType:
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, pad_edge=False, header_style="bold", title_justify="left")
    for column in columns:
        table.add_column(column, no_wrap=True)
    for job in jobs:
        stats = job.get("gpu_stats") or {}
        mean, peak = stats.get("util_mean_pct"), stats.get("memory_peak_mib")
        gpu_ids = ",".join(map(str, job["gpus"])) or "-"
        cells: dict[str, str | Text] = {
            "JOBID": str(job["id"]),
            # never markup, never a raw control character
            "NAME": Text(_short(printable(job["name"]), name_chars)),
            "USER": Text(_short(printable(job["owner"]), user_chars)),
            "GPU_IDS": gpu_ids,
            "GPUS": gpu_ids,
            "TIME": format_duration(job["runtime_s"]),
            "GPU_UTIL": NA if mean is None else f"{mean:.0f}%",
            "GPU_MEM_PEAK": NA if peak is None else format_size_mib(peak),
            "PROGRESS": progress_cell(reports.get(job["id"]), bar_cells),
        }
        cells["UTIL"], cells["PEAK"] = cells["GPU_UTIL"], cells["GPU_MEM_PEAK"]
        table.add_row(*(cells[column] for column in columns))
    return table


def progress_cell(progress: dict[str, Any] | None, bar_cells: int = 10) -> str:
    """`████░░░░░░  45% ETA 2:51`, `step 450` without a total, `-` without progress;
    `bar_cells` 0: ` 45% ETA 2:51`, no bar."""
    if not progress or progress.get("step") is None:
        return "-"
    if not progress.get("total"):
        return progress_count(progress)
    pct = 100 * progress_fraction(progress)
    eta = progress.get("eta_s")
    done = f"{bar(pct, bar_cells)} {pct:3.0f}%" if bar_cells else f"{pct:.0f}%"
    return done + ("" if eta is None else f" ETA {format_duration(eta)}")
