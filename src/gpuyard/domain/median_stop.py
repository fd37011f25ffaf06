"""The median stopping rule (Google Vizier's; no Hyperband brackets): stop a trial whose best
value so far is worse than the median of the other trials' running averages at the same step.

Worked example (minimize val_loss, min_steps 100, min_trials 2). Trials A and B ended with
val_loss 0.9, 0.7, 0.5 at steps 100, 200, 300 (A) and 0.8, 0.6, 0.4 (B). Trial C reports 1.2 at
step 100 and 1.1 at step 200. At step 200 C's best is 1.1; A's running average up to step 200
is (0.9 + 0.7) / 2 = 0.8, B's 0.7; their median 0.75 is better than 1.1: C is stopped with
"val_loss 1.1 worse than the median 0.75 at step 200". Had C reported only step 50, it would
run on (grace: `min_steps`); had only A reached step 200, too (warmup: `min_trials` others
must have got as far as C, here 2).

A series is `[(step, value), ...]` in the order reported (a step reported twice keeps both
values; a step going back, a new run, is taken as it comes). Pure: the server's sweep service
reads the series from the jobs' progress and cancels what this decides.
"""

from __future__ import annotations

import bisect
import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

Series = Sequence[tuple[int, float]]


@dataclass(frozen=True, slots=True)
class StopDecision:
    """Why a trial stops: its best value, the others' median, at `step`."""

    step: int
    best: float
    median: float
    compared: int  # how many other trials made the median

    def reason(self, metric: str) -> str:
        return (
            f"EarlyStopped: {metric} {self.best:.4g} worse than the median {self.median:.4g} "
            f"at step {self.step}"
        )


class Curve:
    """A series made ready for many questions "your running average up to step s?": its values
    ordered by step with prefix sums, so each answer is a binary search (a tick asks every
    running trial's question of every other trial); it grows by `add` (a step going back, a
    new run, is put in its place), and keeps its lowest and highest value."""

    __slots__ = ("_prefix", "_steps", "_values", "high", "last_step", "low")

    def __init__(self, series: Series = ()) -> None:
        self._steps: list[int] = []
        self._values: list[float] = []
        self._prefix: list[float] = [0.0]
        self.last_step = -1  # the highest step (-1: none)
        self.low, self.high = math.inf, -math.inf
        for step, value in sorted(series, key=lambda p: p[0]):
            self.add(step, value)

    def __len__(self) -> int:
        return len(self._steps)

    def add(self, step: int, value: float) -> None:
        self.low, self.high = min(self.low, value), max(self.high, value)
        if step >= self.last_step:
            self._steps.append(step)
            self._values.append(value)
            self._prefix.append(self._prefix[-1] + value)
            self.last_step = step
            return
        i = bisect.bisect_right(self._steps, step)
        self._steps.insert(i, step)
        self._values.insert(i, value)
        self._prefix[i + 1 :] = list(
            itertools.accumulate(self._values[i:], initial=self._prefix[i])
        )[1:]

    def average_upto(self, step: int) -> float | None:
        """The mean of the values reported at steps up to `step` (None: none)."""
        n = bisect.bisect_right(self._steps, step)
        return self._prefix[n] / n if n else None


def should_stop(
    trial: Series | Curve,
    others: Sequence[Series | Curve],
    *,
    minimize: bool = True,
    min_steps: int = 0,
    min_trials: int = 1,
) -> StopDecision | None:
    """Whether `trial` should stop now (None: it runs on). Judged at its latest step `s`:
    after the grace (`s >= min_steps`), against the others that reached `s` (at least
    `min_trials` of them), each by its running average of values up to `s`."""
    judged = trial if isinstance(trial, Curve) else Curve(trial)
    if not len(judged):
        return None
    step = judged.last_step
    if step < min_steps:
        return None
    best = judged.low if minimize else judged.high
    averages = []
    for other in others:
        curve = other if isinstance(other, Curve) else Curve(other)
        if curve.last_step < step:
            continue  # not as far as this trial yet: its average would be of fewer steps
        average = curve.average_upto(step)
        if average is not None:
            averages.append(average)
    if len(averages) < max(1, min_trials):
        return None
    median = statistics.median(averages)
    worse = best > median if minimize else best < median
    return StopDecision(step, best, median, len(averages)) if worse else None


def by_step(
    steps: Sequence[tuple[float, float]], values: Sequence[tuple[float, float]]
) -> list[tuple[int, float]]:
    """A metric's `(time, value)` series as `(step, value)`: each value at the latest step
    reported at or before its time (a value before any step is at step 0)."""
    out: list[tuple[int, float]] = []
    i, step = 0, 0
    for at, value in values:
        while i < len(steps) and steps[i][0] <= at:
            step = int(steps[i][1])
            i += 1
        out.append((step, value))
    return out
