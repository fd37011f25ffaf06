"""Sparklines (`▁▂▃▄▅▆▇█`): a series drawn in one line of text, for `gpuyard show`.

A series longer than the line is averaged in equal runs of points (each cell the mean of its
run: a spike stays visible as a taller cell, noise is smoothed), a shorter one is drawn a cell
per point. Standard library only: `show` is on the CLI's fast start path.

    sparkline([3, 2, 1.5, 1, 0.8])           -> '█▅▃▁▁' (scaled to its own min..max)
    sparkline([0, 50, 100], low=0, high=100) -> '▁▄█'   (a fixed scale: utilisation)
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing stays unimported on the CLI's start path
if TYPE_CHECKING:
    from collections.abc import Sequence

BLOCKS = "▁▂▃▄▅▆▇█"
WIDTH = 40  # cells: the line fits an 80-column terminal with its key and labels


def finite(values: Sequence[float | None]) -> list[float]:
    """The numbers of a series; None, NaN and infinities dropped (nothing to draw)."""
    inf = float("inf")
    return [float(v) for v in values if v is not None and v == v and v not in (inf, -inf)]


def downsample(values: Sequence[float], width: int = WIDTH) -> list[float]:
    """At most `width` values: the means of `width` consecutive runs of about equal length
    (by position, as the points come); a series that already fits is returned as it is."""
    count = len(values)
    if count <= width:
        return list(values)
    means = []
    for cell in range(width):
        start, end = cell * count // width, (cell + 1) * count // width
        run = values[start:end]
        means.append(sum(run) / len(run))
    return means


def sparkline(
    values: Sequence[float | None],
    width: int = WIDTH,
    low: float | None = None,
    high: float | None = None,
) -> str:
    """The series in one line of block characters, at most `width` cells; scaled to its own
    min..max unless `low`/`high` fix the scale (values outside are clamped); a flat series is
    a flat line at mid height. '' when there is nothing to draw."""
    cells = downsample(finite(values), max(1, width))
    if not cells:
        return ""
    bottom = min(cells) if low is None else low
    top = max(cells) if high is None else high
    span = top - bottom
    if span <= 0:
        return BLOCKS[len(BLOCKS) // 2 - 1] * len(cells)
    last = len(BLOCKS) - 1
    line = []
    for value in cells:
        share = (min(max(value, bottom), top) - bottom) / span
        line.append(BLOCKS[round(share * last)])
    return "".join(line)


def number(value: float) -> str:
    """A metric's value in a few characters: `0.3124`, `1.2e-05`, `1234`, `2.5e+06`."""
    if value == int(value) and abs(value) < 1e6:
        return str(int(value))
    return f"{value:.4g}"
