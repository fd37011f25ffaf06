"""The duration predictor (issue 25, part 1): what a user is told their job will take."""

from __future__ import annotations

from gpuyard.scheduling.duration_prediction import DurationPredictor, format_span

_H, _MIN = 3600.0, 60.0


def _history(p: DurationPredictor, user: str, gpus: int, limit: float | None,
             runs: list[float], first_id: int = 0) -> None:  # fmt: skip
    t = 0.0
    for n, run in enumerate(runs):
        p.started(first_id + n, user, gpus, limit, t)
        p.finished(first_id + n, t + run)
        t += run


def test_a_user_whose_last_5_runs_of_4_gpus_took_an_hour_is_told_about_an_hour() -> None:
    p = DurationPredictor()
    _history(p, "ann", 4, None, [55 * _MIN, 58 * _MIN, _H, 62 * _MIN, 65 * _MIN])
    got = p.predict("ann", 4, None, now=10 * _H)
    assert got is not None and got.expected_s == _H and got.runs == 5
    assert got.low_s == 58 * _MIN and got.high_s == 62 * _MIN
    assert got.describe() == (
        "expected 60 min (58-62 min), from your last 5 runs of this size without a time limit"
    )


def test_the_time_limit_is_a_bucket_of_its_own() -> None:
    p = DurationPredictor()
    _history(p, "ann", 4, 1 * _H, [10 * _MIN] * 3)
    _history(p, "ann", 4, 72 * _H, [50 * _H] * 3, first_id=10)
    short, long = p.predict("ann", 4, 1 * _H, 0.0), p.predict("ann", 4, 72 * _H, 0.0)
    assert short is not None and short.expected_s == 10 * _MIN
    assert long is not None and long.expected_s == 50 * _H
    assert short.describe().endswith("from your last 3 runs of this size and time limit")


def test_fallbacks_go_user_and_size_then_user_then_size_then_everyone() -> None:
    p = DurationPredictor()
    _history(p, "ann", 1, None, [_H] * 3)
    _history(p, "bob", 8, None, [5 * _H] * 3, first_id=10)
    same_size = p.predict("ann", 1, 4 * _H, 0.0)  # no runs with that limit: ann's 1-GPU runs
    assert same_size is not None and same_size.source == "user_gpus"
    other_size = p.predict("ann", 2, None, 0.0)  # ann has no 2-GPU runs: all of ann's
    assert other_size is not None and other_size.source == "user"
    assert other_size.describe().endswith("from your last 3 runs")
    stranger = p.predict("cid", 8, None, 0.0)  # cid has nothing: everyone's 8-GPU runs
    assert stranger is not None and stranger.source == "gpus"
    assert stranger.expected_s == 5 * _H and "of 8-GPU jobs" in stranger.describe()
    nobody = p.predict("cid", 2, None, 0.0)
    assert nobody is not None and nobody.source == "all" and nobody.runs == 6


def test_a_sibling_still_running_longer_than_the_median_is_a_lower_bound() -> None:
    p = DurationPredictor()
    _history(p, "ann", 4, None, [20 * _MIN] * 5)
    p.started(99, "ann", 4, None, at=100 * _H)
    early = p.predict("ann", 4, None, now=100 * _H + 10 * _MIN)
    assert early is not None and early.expected_s == 20 * _MIN  # not longer than the median yet
    late = p.predict("ann", 4, None, now=103 * _H)
    assert late is not None and late.expected_s == 3 * _H and late.running_s == 3 * _H
    assert "one of your jobs of this size has run 3 h already" in late.describe()
    # the job itself is not its own sibling (show of a running job)
    itself = p.predict("ann", 4, None, now=103 * _H, job_id=99)
    assert itself is not None and itself.expected_s == 20 * _MIN
    p.finished(99, 103 * _H)  # it ends: a finished run now, not a lower bound
    after = p.predict("ann", 4, None, now=200 * _H)
    assert after is not None and after.running_s is None and after.runs == 6


def test_the_prediction_is_clamped_into_the_time_limit() -> None:
    p = DurationPredictor()
    _history(p, "ann", 2, None, [10 * _H] * 4)
    got = p.predict("ann", 2, 2 * _H, 0.0)
    assert got is not None and got.expected_s == 2 * _H and got.high_s == 2 * _H and got.limited
    assert got.describe().endswith("; at most your time limit")


def test_with_no_history_only_the_limit_is_said_and_without_one_nothing() -> None:
    p = DurationPredictor()
    assert p.predict("ann", 1, None, 0.0) is None
    got = p.predict("ann", 1, 4 * _H, 0.0)
    assert got is not None and got.expected_s == 4 * _H
    assert got.describe() == "at most 4 h (your time limit); no finished runs to learn from yet"


def test_a_preempted_job_counts_every_run_and_a_cancelled_one_nothing() -> None:
    p = DurationPredictor(min_runs=1)
    p.started(1, "ann", 1, None, 0.0)
    p.stopped(1, 30 * _MIN)  # preempted after 30 min
    p.started(1, "ann", 1, None, 2 * _H)
    p.finished(1, 2 * _H + 30 * _MIN)
    p.started(2, "ann", 1, None, 3 * _H)
    p.forget(2)
    got = p.predict("ann", 1, None, 10 * _H)
    assert got is not None and got.expected_s == _H and got.runs == 1


def test_history_keeps_the_recent_runs() -> None:
    p = DurationPredictor(history=4)
    _history(p, "ann", 1, None, [10 * _H] * 4 + [_MIN] * 4)
    got = p.predict("ann", 1, None, 1e9)
    assert got is not None and got.expected_s == _MIN and got.runs == 4


def test_spans_read_as_a_person_says_them() -> None:
    assert [format_span(s) for s in (45, 40 * _MIN, 3.5 * _H, 4 * _H, 50 * _H)] == [
        "45 s", "40 min", "3.5 h", "4 h", "2.1 d",
    ]  # fmt: skip


def test_the_expected_run_alone_is_the_predictions_as_runs_end_between_asks() -> None:
    """`expected_s` (what a policy's key reads) says what `predict` says, and both say what a
    predictor that never asked before says, as each run's end changes a history whose median
    and quartiles were kept from an earlier ask."""
    import random

    rng = random.Random(7)
    p = DurationPredictor()
    events: list[tuple[str, tuple[object, ...]]] = []
    running: list[int] = []
    now, next_id = 0.0, 0
    for step in range(1_500):
        now += rng.uniform(0, 600)
        user, gpus = rng.choice("ab"), rng.choice((1, 2, 8))
        limit = rng.choice((None, 0.0, _H, 4 * _H))
        if running and rng.random() < 0.45:
            event: tuple[str, tuple[object, ...]] = ("finished", (running.pop(0), now))
        else:
            event = ("started", (next_id, user, gpus, limit, now))
            running.append(next_id)
            next_id += 1
        getattr(p, event[0])(*event[1])
        events.append(event)
        own = rng.choice([None, *running[:3]])
        got = p.predict(user, gpus, limit, now, own)
        assert p.expected_s(user, gpus, limit, now, own) == (
            None if got is None else got.expected_s
        )
        if step % 100 == 99:  # a predictor fed the same events, asked nothing before
            fresh = DurationPredictor()
            for name, args in events:
                getattr(fresh, name)(*args)
            assert fresh.predict(user, gpus, limit, now, own) == got
    assert sum(1 for name, _ in events if name == "finished") > 500
