"""A job's progress over time, bounded however long it runs.

One timeline per job: points `(at, step, total, metrics)`, oldest first, at most `MAX_POINTS`.
Reports are put into buckets of `resolution_s` seconds (1 s at first): a report in the same
bucket as the last point merges into it (step and total: the latest; each metric: the mean of
its values in the bucket), else it starts a new point at its own time. When the timeline is
full, adjacent pairs merge (the earlier point's time, the later one's step and total, each
metric's mean) and the resolution doubles: a week-long job keeps 1,000 to 2,000 evenly spread
points, and a series costs at most MAX_POINTS rows in the store whatever the job reported.
Every series ("step" and each metric) is read off the timeline, downsampled further on read.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

MAX_POINTS = 2000
FIRST_RESOLUTION_S = 1.0


@dataclass(slots=True)
class ProgressPoint:
    """One bucket of a job's progress. `counts`: values merged into each metric's mean (kept
    in memory only; a point loaded from the store counts as one)."""

    at: float
    step: int | None
    total: int | None
    metrics: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    def merge(self, step: int | None, total: int | None, metrics: dict[str, float]) -> None:
        if step is not None:
            self.step, self.total = step, total
        for name, value in metrics.items():
            n = self.counts.get(name, 1) if name in self.metrics else 0
            mean = self.metrics.get(name, 0.0)
            self.metrics[name] = (mean * n + value) / (n + 1)
            self.counts[name] = n + 1

    def absorb(self, later: ProgressPoint) -> None:
        """Take in the next point (its step and total win; metrics weighted by their counts)."""
        if later.step is not None:
            self.step, self.total = later.step, later.total
        for name, value in later.metrics.items():
            n = self.counts.get(name, 1) if name in self.metrics else 0
            m = later.counts.get(name, 1)
            mean = self.metrics.get(name, 0.0)
            self.metrics[name] = (mean * n + value * m) / (n + m)
            self.counts[name] = n + m


class Timeline:
    """The bounded timeline of one job (not thread-safe: its owner locks). `changed` holds the
    times of points added or changed since `take_changes`, `rewritten` says the whole timeline
    was compacted since (the store's copy must be replaced)."""

    def __init__(self, points: Iterable[ProgressPoint] = (), max_points: int = MAX_POINTS) -> None:
        self.points: list[ProgressPoint] = sorted(points, key=lambda p: p.at)
        self.max_points = max(2, max_points)
        self.resolution_s = FIRST_RESOLUTION_S
        while len(self.points) > self.max_points:
            self._halve()
        if len(self.points) >= 2:  # a loaded timeline: go on at about its spacing
            span = self.points[-1].at - self.points[0].at
            while self.resolution_s * self.max_points < span:
                self.resolution_s *= 2
        self.changed: set[float] = set()
        self.rewritten = False

    def add(
        self, at: float, step: int | None, total: int | None, metrics: dict[str, float]
    ) -> None:
        last = self.points[-1] if self.points else None
        if last is not None and at < last.at:
            at = last.at  # the clock stepped back, or a job's own times: never out of order
        if last is not None and at - last.at < self.resolution_s:
            last.merge(step, total, metrics)
            self.changed.add(last.at)
            return
        point = ProgressPoint(at, step, total)
        point.merge(step, total, metrics)
        self.points.append(point)
        self.changed.add(at)
        if len(self.points) > self.max_points:
            self._halve()
            self.rewritten = True

    def _halve(self) -> None:
        merged = []
        for i in range(0, len(self.points) - 1, 2):
            first = self.points[i]
            first.absorb(self.points[i + 1])
            merged.append(first)
        if len(self.points) % 2:
            merged.append(self.points[-1])
        self.points = merged
        self.resolution_s *= 2

    def take_changes(self) -> tuple[list[ProgressPoint], bool]:
        """What to write: (points to upsert, whether to replace the stored timeline whole)."""
        if self.rewritten:
            changed, whole = list(self.points), True
        else:
            changed, whole = [p for p in self.points if p.at in self.changed], False
        self.changed, self.rewritten = set(), False
        return [copy_point(p) for p in changed], whole

    def series(
        self, names: Sequence[str] | None, max_points: int
    ) -> dict[str, list[tuple[float, float]]]:
        """Each named series (None: "step" and every metric), at most `max_points` each."""
        wanted = set(names) if names is not None else None
        found: dict[str, list[tuple[float, float]]] = {}
        for point in self.points:
            if point.step is not None and (wanted is None or "step" in wanted):
                found.setdefault("step", []).append((point.at, float(point.step)))
            for name, value in point.metrics.items():
                if wanted is None or name in wanted:
                    found.setdefault(name, []).append((point.at, value))
        return {name: downsample(values, max_points) for name, values in found.items()}


def copy_point(point: ProgressPoint) -> ProgressPoint:
    return ProgressPoint(point.at, point.step, point.total, dict(point.metrics))


def downsample(values: list[tuple[float, float]], max_points: int) -> list[tuple[float, float]]:
    """At most `max_points` of `values`: runs of equal length averaged (each run's first time),
    the last value kept as it is (the latest is what a chart's end must show)."""
    if max_points <= 0:
        return []
    if len(values) <= max_points:
        return values
    if max_points == 1:
        return [values[-1]]
    head, last = values[:-1], values[-1]
    per = -(-len(head) // (max_points - 1))  # ceil
    out = []
    for i in range(0, len(head), per):
        run = head[i : i + per]
        out.append((run[0][0], sum(v for _, v in run) / len(run)))
    out.append(last)
    return out
