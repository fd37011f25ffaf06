"""How long a job will run, predicted from the runs of its user's jobs like it, bounded by its
time limit: what `gpuyard show` and `submit --dry-run` say ("expected 40 min, from your last 5
runs of this size").

Worked example. User u's last five 4-GPU jobs with `--time 4h` ran 50, 55, 60, 62 and 70 min. A
new 4-GPU, 4 h job of u is expected to run the median, 60 min (spread: the quartiles, 55-62
min), "from your last 5 runs of this size and time limit". If one of u's 4-GPU jobs has been
running for 3 h, the finished runs are a biased sample (the long ones have not finished yet:
survivorship), so that run is a lower bound: expected 3 h ("one of your jobs of this size has
run 3 h already"). Whatever history says, a job cannot run past its limit: with `--time 2h`
the expectation is at most 2 h.

Why these choices (a study of the Philly traces, issue 25): history explains only a third of
the variance of log duration, and finer point predictors (windows, means, quantiles) land
within 6% of a plain median, so a median of the recent runs it is, with the quartiles shown as
the spread so nobody mistakes it for a promise. The time limit the user chose is the strongest
single signal: it is both part of the history key (a user's `--time 1h` jobs are not their
`--time 72h` jobs) and an upper bound.

Fallbacks, first with at least `MIN_RUNS` (3) runs: (user, GPUs, time limit) -> (user, GPUs)
-> user -> GPUs (everyone's jobs of that size) -> everyone's. `HISTORY_RUNS` (32) recent runs
per key: recent enough to follow a user's current work. With no history at all, the limit (if
any) is the only bound and is said so.

Pure and fed by events (`started`, `stopped`, `finished`), as a policy is: the live scheduler
feeds it the same steps as its policy (`services/scheduler/policy_steps.py`). Reads may run on
another thread than the feed without a lock: a history is an immutable tuple, replaced at each
run, and a reader copies the running jobs in one C-level step (`list(d.items())`, which the
GIL makes atomic) rather than iterating a dict the feed may change.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

HISTORY_RUNS = 32
MIN_RUNS = 3


@dataclass(frozen=True, slots=True)
class Prediction:
    """An expected run time with its spread and where it comes from."""

    expected_s: float
    low_s: float  # the lower quartile of the runs it comes from
    high_s: float  # the upper quartile (at most the limit)
    runs: int  # how many finished runs it comes from (0: only the limit)
    # the history key's level: user_gpus_limit (user_gpus_nolimit for jobs without a limit),
    # user_gpus, user, gpus, all; or limit (no history: only the limit)
    source: str
    gpus: int
    running_s: float | None = None  # a same-size sibling's run so far, when that raised it
    limited: bool = False  # clamped into the time limit

    def describe(self) -> str:
        """One line a user reads: "expected 40 min (35-50 min), from your last 5 runs of this
        size"."""
        if self.source == "limit":
            return (f"at most {format_span(self.expected_s)} (your time limit); no finished "
                    "runs to learn from yet")  # fmt: skip
        spread = ""
        low, high = format_span(self.low_s), format_span(self.high_s)
        if low != high:
            unit = high.rsplit(" ", 1)[1]
            low = low.removesuffix(f" {unit}")  # "58-62 min", "45 s-2 min"
            spread = f" ({low}-{high})"
        line = f"expected {format_span(self.expected_s)}{spread}, {self._origin()}"
        if self.running_s is not None:
            line += f"; one of your jobs of this size has run {format_span(self.running_s)}"
            line += " already"
        if self.limited:
            line += "; at most your time limit"
        return line

    def _origin(self) -> str:
        n = self.runs
        runs = "run" if n == 1 else f"{n} runs"
        return {
            "user_gpus_limit": f"from your last {runs} of this size and time limit",
            "user_gpus_nolimit": f"from your last {runs} of this size without a time limit",
            "user_gpus": f"from your last {runs} of this size",
            "user": f"from your last {runs}",
            "gpus": f"from the last {runs} of {self.gpus}-GPU jobs",
        }.get(self.source, f"from the last {runs} on this server")


def format_span(seconds: float) -> str:
    """45 s, 40 min, 3.5 h, 2.1 d: a duration as a person says it."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h".replace(".0 h", " h")
    return f"{seconds / 86400:.1f} d".replace(".0 d", " d")


@dataclass(frozen=True, slots=True)
class _Job:
    user: str
    gpus: int
    limit_s: float | None


class DurationPredictor:
    """Recent run times per (user, GPUs, time limit) and coarser keys; see the module."""

    def __init__(self, history: int = HISTORY_RUNS, min_runs: int = MIN_RUNS) -> None:
        self._size = history
        self._min_runs = min_runs
        self._runs: dict[Hashable, tuple[float, ...]] = {}  # oldest first
        # Per key: its runs' (median, quartiles), valid while `_runs[key]` is that very tuple
        # (a run's end replaces it): a queue of 10,000 jobs asks again and again (a restart's
        # replay predicted 50,000 times, sorting the same 32 runs each time). A reader on
        # another thread may store one too: tagged with the tuple it came from, never stale.
        self._spread: dict[Hashable, tuple[tuple[float, ...], float, float, float]] = {}
        self._jobs: dict[int, _Job] = {}
        self._ran_s: dict[int, float] = {}  # run time of earlier runs (preempted, requeued)
        # Current runs per (user, GPUs): job id -> when that run began
        self._running: dict[tuple[str, int], dict[int, float]] = {}

    # -- events -------------------------------------------------------------------------------
    def started(self, job_id: int, user: str, gpus: int, limit_s: float | None, at: float) -> None:
        job = self._jobs[job_id] = _Job(user, gpus, limit_s)
        key = (job.user, job.gpus)
        self._running.setdefault(key, {})[job_id] = at

    def stopped(self, job_id: int, at: float) -> None:
        """A run ended without the job ending (preempted, requeued): its time is kept."""
        began = self._end_run(job_id)
        if began is not None:
            self._ran_s[job_id] = self._ran_s.get(job_id, 0.0) + max(0.0, at - began)

    def finished(self, job_id: int, at: float) -> None:
        """The job ended: its whole run time (every run) joins the history."""
        began = self._end_run(job_id)
        job = self._jobs.pop(job_id, None)
        ran_s = self._ran_s.pop(job_id, 0.0) + (max(0.0, at - began) if began is not None else 0)
        if job is None or began is None:
            return
        for key in _keys(job.user, job.gpus, job.limit_s):
            self._runs[key] = (*self._runs.get(key, ())[-(self._size - 1):], ran_s)

    def forget(self, job_id: int) -> None:
        """Cancelled before it ended a run: nothing to learn."""
        self._end_run(job_id)
        self._jobs.pop(job_id, None)
        self._ran_s.pop(job_id, None)

    def _end_run(self, job_id: int) -> float | None:
        job = self._jobs.get(job_id)
        if job is None:
            return None
        key = (job.user, job.gpus)
        runs = self._running.get(key)
        return runs.pop(job_id, None) if runs is not None else None

    # -- the prediction -----------------------------------------------------------------------
    def predict(
        self, user: str, gpus: int, limit_s: float | None, now: float, job_id: int | None = None
    ) -> Prediction | None:
        """The expected whole run time of a job of `user` with `gpus` and `limit_s` (None: no
        history and no limit). `job_id`: the job itself, left out of its running siblings."""
        found = self._history(user, gpus, limit_s)
        if found is None:
            if not limit_s:
                return None
            return Prediction(limit_s, limit_s, limit_s, 0, "limit", gpus)
        source, runs, expected, low, high = found
        if source == "user_gpus_limit" and not limit_s:
            source = "user_gpus_nolimit"
        running_s = None
        longest = self._longest_sibling(user, gpus, now, job_id)
        if longest > expected:  # a sibling still running longer: the history is optimistic
            expected = running_s = longest
            high = max(high, longest)
        limited = bool(limit_s) and expected > (limit_s or 0.0)
        if limit_s:
            expected, low, high = min(expected, limit_s), min(low, limit_s), min(high, limit_s)
        return Prediction(expected, low, high, len(runs), source, gpus, running_s, limited)

    def expected_s(
        self, user: str, gpus: int, limit_s: float | None, now: float, job_id: int | None = None
    ) -> float | None:
        """`predict(...).expected_s` without the rest (what a policy's key reads, for every
        job a queue or a restart's replay ranks)."""
        found = self._history(user, gpus, limit_s)
        if found is None:
            return limit_s or None
        expected = max(found[2], self._longest_sibling(user, gpus, now, job_id))
        return min(expected, limit_s) if limit_s else expected

    def _history(
        self, user: str, gpus: int, limit_s: float | None
    ) -> tuple[str, tuple[float, ...], float, float, float] | None:
        """The first key with `min_runs` runs: (its level, its runs, their median and
        quartiles); None if none has."""
        runs_of, least = self._runs, self._min_runs
        for level, key in zip(_LEVELS, _keys(user, gpus, limit_s), strict=True):
            runs = runs_of.get(key, ())
            if len(runs) < least:
                continue
            spread = self._spread.get(key)
            if spread is None or spread[0] is not runs:
                ordered = sorted(runs)
                spread = self._spread[key] = (runs, _quantile(ordered, 0.5),
                                              _quantile(ordered, 0.25), _quantile(ordered, 0.75))
            return level, runs, spread[1], spread[2], spread[3]
        return None

    def _longest_sibling(self, user: str, gpus: int, now: float, job_id: int | None) -> float:
        """The longest run so far of the user's other jobs of this size still running (0:
        none)."""
        running = self._running.get((user, gpus))
        if not running:
            return 0.0
        siblings = list(running.items())  # one atomic copy
        ran = self._ran_s
        return max((now - t + ran.get(i, 0.0) for i, t in siblings if i != job_id), default=0.0)


_LEVELS = ("user_gpus_limit", "user_gpus", "user", "gpus", "all")


def _keys(user: str, gpus: int, limit_s: float | None) -> tuple[Hashable, ...]:
    return (("ugl", user, gpus, limit_s), ("ug", user, gpus), ("u", user), ("g", gpus), ("a",))


def _quantile(ordered: list[float], q: float) -> float:
    """Linear interpolation between order statistics (the median of 4 runs is the mean of the
    middle two)."""
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)
