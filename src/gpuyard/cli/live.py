"""`gpuyard wait` and `logs -f` on a terminal: a progress bar per job, kept at the bottom.

Each job's line: a spinner, the job, a bar, step/total and percentage, its rate and ETA (the
server's, from the progress route) and its latest metrics; a job that reports no progress
shows its state and how long it has been in it. Drawn with rich on stderr, so stdout carries
the log alone; only when stderr is a terminal (`wants_live`): piped, with `--quiet` or on a
dumb terminal the commands print exactly what they always did, which scripts parse.

The lines are drawn by hand (`Footer`: erase, write, keep count) rather than by rich's Live:
`logs -f` writes the job's own bytes to stdout untouched (its colours, its `\\r` bars), and the
footer is taken away before each piece of the log and put back under it after a whole line.
The server is asked for each shown job's record every 0.5 s and its progress every second; an
older server without the progress route just gets the spinner.
"""

from __future__ import annotations

import io
import os
import sys
import threading
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from gpuyard.cli.progress_format import (
    metrics_text,
    progress_count,
    progress_fraction,
    rate_text,
)
from gpuyard.cli.render import printable
from gpuyard.domain.units import format_duration

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import TextIO

    from rich.console import RenderableType

    from gpuyard.client import Client

FRAME_S = 0.25  # the spinner's frame; the footer is redrawn this often
JOB_POLL_S = 0.5  # each shown job's record (its state), as `wait` always asked
PROGRESS_POLL_S = 1.0  # each shown running job's progress
SETTLE_S = 1.5  # an ended job short of its total: its progress asked again for this long
BAR_WIDTH = 24
NAME_WIDTH = 20


def wants_live(quiet: bool) -> bool:
    """A progress display only for a person: stderr a terminal that can move its cursor."""
    if quiet or os.environ.get("TERM") == "dumb":
        return False
    try:
        return os.isatty(sys.stderr.fileno())
    except (AttributeError, ValueError, OSError):
        return False


class JobView:
    """One job as last fetched: its record and progress, and when (monotonic seconds)."""

    def __init__(self, job_id: int) -> None:
        self.job_id = job_id
        self.job: dict[str, Any] | None = None
        self.job_at = 0.0
        self.progress: dict[str, Any] | None = None
        self.progress_at = 0.0
        self.spinner: Any = None  # rich's Spinner, made at the first frame

    @property
    def ended(self) -> bool:
        from gpuyard.client import _terminal_states

        return self.job is not None and self.job["state"] in _terminal_states()


class Board:
    """The jobs being watched, refreshed from the server, drawn as lines of text."""

    def __init__(self, session: Client, job_ids: Sequence[int]) -> None:
        self.session = session
        self.views = {job_id: JobView(job_id) for job_id in job_ids}
        self.progress_route = True  # False: an older server (no bars, spinners only)

    def poll_job(self, view: JobView) -> dict[str, Any]:
        view.job, view.job_at = self.session.job(view.job_id), time.monotonic()
        return view.job

    def poll_progress(self, view: JobView) -> None:
        if not self.progress_route or view.job is None or not view.job.get("started_at"):
            return
        progress = self.session.progress(view.job_id)
        if progress is None:
            self.progress_route = False
            return
        view.progress, view.progress_at = progress, time.monotonic()

    def shown(self, height: int) -> tuple[list[JobView], int]:
        """The views that fit `height` lines (unfinished first, in the order given) and how
        many more there are (one line says so)."""
        views = list(self.views.values())
        if len(views) <= height:
            return views, 0
        views.sort(key=lambda v: v.ended)  # stable: the order given, ended ones last
        return views[: max(1, height - 1)], len(views) - max(1, height - 1)

    def render(self, width: int, height: int) -> str:
        views, more = self.shown(height)
        bar_width = BAR_WIDTH if width >= 100 else max(6, width // 8)
        return to_ansi(board_table(views, more, time.monotonic(), bar_width), width)


def board_table(
    views: Sequence[JobView], more: int, now: float, bar_width: int = BAR_WIDTH
) -> RenderableType:
    """The lines of the board: one per job, then `… and N more jobs` when some did not fit."""
    from rich.table import Table
    from rich.text import Text

    # Only the last column gives way on a narrow terminal (expand + its ratio): the others
    # keep their width, and no line ever wraps.
    table = Table.grid(padding=(0, 1), expand=True)
    table.add_column(no_wrap=True, width=1)  # spinner, or ✓ / ✗ when it ended
    table.add_column(no_wrap=True)  # job 12 name
    table.add_column(no_wrap=True, width=bar_width)  # bar
    table.add_column(no_wrap=True, overflow="ellipsis", ratio=1)  # counts, rate, ETA, metrics
    for view in views:
        table.add_row(*job_cells(view, now, bar_width))
    if more:
        table.add_row("", Text(f"… and {more} more jobs", style="dim"), "", "")
    return table


def job_cells(view: JobView, now: float, bar_width: int = BAR_WIDTH) -> list[RenderableType]:
    """A job's cells: mark, name, bar and what it reports (or its state and time in it)."""
    from rich.progress_bar import ProgressBar
    from rich.spinner import Spinner
    from rich.text import Text

    job, progress = view.job or {}, view.progress
    state = str(job.get("display_state") or job.get("state") or "…")
    label = Text(f"job {view.job_id}", style="bold")
    if job.get("name"):
        label.append(" " + _clip(printable(str(job["name"])), NAME_WIDTH))
    mark: RenderableType
    if view.ended:
        ok = job["state"] == "COMPLETED"
        mark = Text("✓" if ok else "✗", style="green" if ok else "red")
    else:
        if view.spinner is None:  # one per job: its frame follows the time since it began
            view.spinner = Spinner("dots", style="cyan")
        mark = view.spinner.render(now)
    has_step = progress is not None and progress.get("step") is not None
    if not has_step:
        return [mark, label, Text(" " * bar_width), Text(_state_line(view, now), style="dim")]
    assert progress is not None
    total = progress.get("total")
    bar = ProgressBar(
        total=1.0 if total else None, completed=progress_fraction(progress), width=bar_width,
        animation_time=now,
    )  # fmt: skip
    info = Text(progress_count(progress))
    rate = rate_text(progress.get("rate_per_s"))
    if rate:
        info.append(f"  {rate}", style="cyan")
    eta = progress.get("eta_s")
    if eta is not None and total and not view.ended:
        info.append(f"  ETA {format_duration(max(0.0, eta - (now - view.progress_at)))}",
                    style="yellow")  # fmt: skip
    elif view.ended:
        info.append(f"  {state}", style="green" if job["state"] == "COMPLETED" else "red")
    metrics = metrics_text(progress.get("metrics") or {})
    if metrics:
        info.append(f"  {metrics}")
    return [mark, label, bar, info]


def _state_line(view: JobView, now: float) -> str:
    """`RUNNING 0:42`, `PENDING (Resources) 0:05`, `COMPLETED in 1:02`."""
    job = view.job
    if job is None:
        return "asking the server…"
    state = str(job.get("display_state") or job["state"])
    if view.ended:
        return f"{state} in {format_duration(job.get('runtime_s') or 0)}"
    if job["state"] == "PENDING":
        reason = job.get("reason")
        waited = _since(job.get("submitted_at"))
        text = f"{state} ({reason})" if reason and reason != "None" else state
        return f"{text} {format_duration(waited)}" if waited is not None else text
    runtime = job.get("runtime_s")
    if runtime is None:
        return state
    return f"{state} {format_duration(runtime + (now - view.job_at))}"


def _since(iso: str | None) -> float | None:
    if not iso:
        return None
    return (datetime.now(UTC) - datetime.fromisoformat(iso)).total_seconds()


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def to_ansi(renderable: RenderableType, width: int) -> str:
    """The renderable as terminal text, each line cropped to `width` (no line wraps, so the
    footer knows how many lines it drew), without a trailing newline."""
    from rich.console import Console

    console = Console(file=io.StringIO(), force_terminal=True, width=max(20, width),
                      legacy_windows=False)  # fmt: skip
    console.print(renderable, end="", crop=True, soft_wrap=False)
    file = console.file
    assert isinstance(file, io.StringIO)
    return "\n".join(line.rstrip() for line in file.getvalue().rstrip("\n").split("\n"))


def terminal_size() -> tuple[int, int]:
    """(columns, lines) of stderr's terminal; the last column is left free (no auto-wrap)."""
    try:
        size = os.get_terminal_size(sys.stderr.fileno())
        return max(20, size.columns - 1), max(2, size.lines - 1)
    except (AttributeError, ValueError, OSError):
        return 79, 23


class Footer:
    """Lines drawn at the bottom of a terminal and taken away again; the cursor rests at the
    end of their last line. Everything else on the terminal is left alone."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.lines = 0
        self.text = ""

    def start(self) -> None:
        self._write("\x1b[?25l")  # the cursor hidden while the footer is redrawn

    def draw(self, text: str) -> None:
        self.text = text
        self._write(self._erase() + text)
        self.lines = text.count("\n") + 1

    def hide(self) -> None:
        if self.lines:
            self._write(self._erase())
            self.lines = 0

    def close(self, keep: bool) -> None:
        """Leave the last lines drawn with the cursor on the next line (`keep`), or take
        them away; the cursor shown again."""
        if keep and self.lines:
            self._write("\n\x1b[?25h")
            self.lines = 0
        else:
            self.hide()
            self._write("\x1b[?25h")

    def _erase(self) -> str:
        if not self.lines:
            return ""
        return "\r\x1b[2K" + "\x1b[1A\x1b[2K" * (self.lines - 1)

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass  # the terminal went away: the command goes on without its footer


def wait_live(session: Client, job_ids: Sequence[int]) -> list[dict[str, Any]]:
    """`Client.wait` with a bar per job on stderr; returns the jobs' final records. The last
    frame stays on the terminal (each job ✓ or ✗); Ctrl-C takes the bars away (the jobs run
    on: a frame left there would look like their state)."""
    board = Board(session, job_ids)
    footer = Footer(sys.stderr)
    ended: dict[int, dict[str, Any]] = {}
    ended_at: dict[int, float] = {}  # monotonic
    next_job = next_progress = 0.0
    keep = True
    footer.start()
    try:
        while True:
            now = time.monotonic()
            width, height = terminal_size()
            views, _ = board.shown(height)
            if now >= next_job:
                next_job = now + JOB_POLL_S
                for view in board.views.values():
                    if view.job_id in ended:
                        continue
                    job = board.poll_job(view)
                    if view.ended:
                        ended[view.job_id], ended_at[view.job_id] = job, now
                        board.poll_progress(view)  # its last report, for the last frame
            late = [
                v for v in views if v.ended and _short(v) and now - ended_at[v.job_id] < SETTLE_S
            ]
            if now >= next_progress:
                next_progress = now + PROGRESS_POLL_S
                for view in views:
                    if not view.ended or view in late:
                        board.poll_progress(view)
            footer.draw(board.render(width, height))
            if len(ended) == len(job_ids) and not late:
                return [ended[job_id] for job_id in job_ids]
            time.sleep(FRAME_S)
    except KeyboardInterrupt:
        keep = False
        raise
    finally:
        footer.close(keep=keep)


def _short(view: JobView) -> bool:
    """An ended job whose last progress seen is short of its total: the server reads a job's
    last lines within a second of its end, so its last frame is asked again once."""
    progress = view.progress or {}
    step, total = progress.get("step"), progress.get("total")
    return step is not None and bool(total) and step < total


def follow_live(
    session: Client, job_id: int, tail: int | None, on_lost: Callable[[], None]
) -> None:
    """`Client.follow_log` to stdout, its bytes untouched, with the job's bar under the log
    while it runs (a thread polls and redraws it). When stdout is the terminal too, the bar
    is taken away before each piece of the log and drawn again after a whole line; while a
    line is unfinished (a job's own `\\r` progress bar) it stays away. Taken away at the end."""
    out = sys.stdout.buffer
    shared_terminal = _isatty(out)
    board = Board(session, [job_id])
    view = board.views[job_id]
    footer = Footer(sys.stderr)
    lock = threading.Lock()
    stop = threading.Event()
    at_line_start = [True]

    def tick() -> None:
        next_job = next_progress = 0.0
        while not stop.is_set():
            now = time.monotonic()
            try:
                if now >= next_job:
                    next_job = now + JOB_POLL_S
                    board.poll_job(view)
                if now >= next_progress:
                    next_progress = now + PROGRESS_POLL_S
                    board.poll_progress(view)
            except Exception:  # the bar is a courtesy: the log goes on
                pass
            if view.job is not None:
                text = board.render(*terminal_size())
                with lock:
                    if not stop.is_set() and at_line_start[0]:
                        footer.draw(text)
            stop.wait(FRAME_S)

    def lost() -> None:
        with lock:
            footer.hide()
            on_lost()

    ticker = threading.Thread(target=tick, name="gpuyard-progress", daemon=True)
    footer.start()
    ticker.start()
    try:
        for chunk in session.follow_log(job_id, tail=tail, on_lost=lost):
            with lock:
                if shared_terminal:
                    footer.hide()
                out.write(chunk)
                out.flush()
                if shared_terminal and chunk:
                    at_line_start[0] = chunk.endswith(b"\n")
                    if at_line_start[0] and footer.text:
                        footer.draw(footer.text)
    finally:
        stop.set()
        with lock:
            footer.close(keep=False)


def _isatty(stream: object) -> bool:
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError, OSError):
        return False
