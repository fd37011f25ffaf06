"""A job's progress as text: its progress line, and `show`'s sparklines of a metric and of GPU use.

`show` prints them in the record (`chart_fields`); `wait` and `logs -f` draw the progress line
under a bar (cli/live.py), `top` beside each running job (cli/top.py). Fast to import: the CLI's
start path.
"""

from __future__ import annotations

from gpuyard.cli.render import printable
from gpuyard.domain.units import format_duration

TYPE_CHECKING = False  # typing stays unimported on the CLI's start path (~2 ms)
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

METRICS_SHOWN = 3  # the latest metrics on a progress line (a bar has room for two or three)


def progress_text(
    progress: dict[str, Any] | None, metrics_shown: int = METRICS_SHOWN
) -> str | None:
    """`450/1000 (45%), 3.2 steps/s, ETA 2:51, loss=0.312 acc=0.91` from the progress route's
    answer; `step 450, ...` without a total; None before the job reported any step."""
    if not progress or progress.get("step") is None:
        return None
    parts = [progress_count(progress)]
    rate = rate_text(progress.get("rate_per_s"))
    if rate:
        parts.append(rate)
    if progress.get("eta_s") is not None and progress.get("total"):
        parts.append(f"ETA {format_duration(progress['eta_s'])}")
    metrics = metrics_text(progress.get("metrics") or {}, metrics_shown)
    return ", ".join(parts) + (f", {metrics}" if metrics else "")


def progress_count(progress: dict[str, Any]) -> str:
    """`450/1000 (45%)`, or `step 450` when the job gave no total."""
    step, total = progress["step"], progress.get("total")
    if not total:
        return f"step {step}"
    return f"{step}/{total} ({100 * progress_fraction(progress):.0f}%)"


def progress_fraction(progress: dict[str, Any]) -> float:
    """Done share 0..1 (the server's, or step/total); 0 without a total."""
    fraction = progress.get("fraction")
    if fraction is None:
        total = progress.get("total")
        fraction = progress["step"] / total if total and progress.get("step") is not None else 0
    return float(max(0.0, min(1.0, fraction)))


def rate_text(per_s: float | None) -> str:
    """`3.2 steps/s`, or `12.5 s/step` under one step a second (as tqdm); '' when unknown."""
    if not per_s or per_s <= 0:
        return ""
    if per_s >= 1:
        return f"{per_s:.3g} steps/s"
    return f"{1 / per_s:.3g} s/step"


def metrics_text(metrics: dict[str, float | None], limit: int = METRICS_SHOWN) -> str:
    """`loss=0.312 acc=0.91`: the first `limit` metrics (names as a job gave them, escaped)."""
    from gpuyard.cli.sparkline import number

    shown = [(k, v) for k, v in metrics.items() if v is not None][:limit]
    return " ".join(f"{printable(str(name))}={number(value)}" for name, value in shown)


def chart_metric(progress: dict[str, Any] | None) -> str | None:
    """The metric `show` draws: `loss`, else the first whose name has `loss` in it, else the
    first the job reported; None without metrics."""
    names = [str(name) for name in ((progress or {}).get("metrics") or {})]
    if not names:
        return None
    if "loss" in names:
        return "loss"
    return next((name for name in names if "loss" in name.lower()), names[0])


def chart_fields(
    progress: dict[str, Any] | None,
    metric: str | None,
    series: dict[str, Any] | None,
    gpu_history: dict[str, Any] | None,
) -> list[tuple[str, object]]:
    """`show`'s lines for a job's progress and its charts: Progress, a sparkline of the metric
    (LossCurve, or MetricCurve for another metric) and of its GPUs' utilisation
    (GpuUtilCurve); none for what the server does not have (or an older server)."""
    fields: list[tuple[str, object]] = []
    line = progress_text(progress, metrics_shown=6)
    if line:
        fields.append(("Progress", line))
    points = ((series or {}).get("series") or {}).get(metric) if metric else None
    chart = metric_chart(metric, points) if metric and points else None
    if chart:
        fields.append(("LossCurve" if "loss" in (metric or "").lower() else "MetricCurve", chart))
    chart = util_chart(gpu_history)
    if chart:
        fields.append(("GpuUtilCurve", chart))
    return fields


def metric_chart(name: str, points: Sequence[Sequence[float | None]]) -> str | None:
    """`█▆▄▃▂▂▁▁ min 0.298 max 2.31 (loss)` from `[[epoch_s, value], ...]`."""
    from gpuyard.cli.sparkline import finite, number, sparkline

    values = [point[1] for point in points if len(point) > 1]
    line, numbers = sparkline(values), finite(values)
    if not line:
        return None
    low, high = number(min(numbers)), number(max(numbers))
    return f"{line} min {low} max {high} ({printable(name)}{_cells(len(numbers))})"


def _cells(count: int) -> str:
    """What a sparkline's cell shows when the series is longer than the line: the mean of
    several points (min and max are the points', so a cell may not reach them)."""
    from gpuyard.cli.sparkline import WIDTH

    if count <= WIDTH:
        return ""
    exact = count % WIDTH == 0
    return f", each cell a mean of {'' if exact else '~'}{round(count / WIDTH)} points"


def util_chart(history: dict[str, Any] | None) -> str | None:
    """`▂▅▇███▇ min 3% max 100% (GPU 0,1)`: utilisation on a fixed 0..100 scale over the
    job's runs, its GPUs' samples together in time order (a cell: their mean)."""
    from gpuyard.cli.sparkline import finite, sparkline

    gpus = (history or {}).get("gpus") or []
    samples = sorted(
        (s[0], s[1])
        for g in gpus
        for s in g.get("samples") or []
        if len(s) > 1 and s[1] is not None
    )
    values = [util for _, util in samples]
    line, numbers = sparkline(values, low=0, high=100), finite(values)
    if not line:
        return None
    indices = ",".join(str(g["index"]) for g in gpus if g.get("samples"))
    return (f"{line} min {min(numbers):.0f}% max {max(numbers):.0f}% (GPU {indices}"
            f"{_cells(len(numbers))})")  # fmt: skip
