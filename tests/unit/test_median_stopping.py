"""The median stopping rule (`domain/median_stop.py`) on hand-made series: who stops, at which
step, against which median; the grace, the warmup, maximizing; and a metric's time series
matched to steps."""

from __future__ import annotations

import pytest

from gpuyard.domain.median_stop import Curve, StopDecision, by_step, should_stop

A = [(100, 0.9), (200, 0.7), (300, 0.5)]
B = [(100, 0.8), (200, 0.6), (300, 0.4)]


def test_the_docstrings_example_stops_a_trial_worse_than_the_median_of_running_averages() -> None:
    c = [(100, 1.2), (200, 1.1)]
    decision = should_stop(c, [A, B], min_steps=100, min_trials=2)
    assert decision == StopDecision(step=200, best=1.1, median=pytest.approx(0.75), compared=2)
    assert decision.reason("val_loss") == (
        "EarlyStopped: val_loss 1.1 worse than the median 0.75 at step 200"
    )


def test_a_trial_as_good_as_the_others_runs_on() -> None:
    good = [(100, 0.85), (200, 0.5)]  # its best, 0.5, beats the median 0.75
    assert should_stop(good, [A, B], min_trials=2) is None
    # its best so far counts, not its latest: a noisy step does not stop it
    noisy = [(100, 0.6), (200, 2.0)]
    assert should_stop(noisy, [A, B], min_trials=2) is None


def test_grace_no_trial_is_judged_before_min_steps() -> None:
    bad = [(50, 9.0), (99, 9.0)]
    assert should_stop(bad, [A, B], min_steps=100, min_trials=2) is None
    assert should_stop([*bad, (100, 9.0)], [A, B], min_steps=100, min_trials=2) is not None


def test_warmup_needs_enough_others_that_got_as_far() -> None:
    bad = [(300, 5.0)]
    short = [(100, 0.1)]  # has not reached step 300: not compared
    assert should_stop(bad, [A, short], min_trials=2) is None
    assert should_stop(bad, [A, short, B], min_trials=2) is not None
    assert should_stop(bad, [], min_trials=1) is None
    assert should_stop([], [A, B]) is None


def test_the_median_uses_only_values_up_to_the_trials_step() -> None:
    # At step 100 the others' averages are their first values (0.9, 0.8): median 0.85.
    decision = should_stop([(100, 0.86)], [A, B], min_trials=2)
    assert decision is not None and decision.median == pytest.approx(0.85) and decision.step == 100
    # a value later than the step (A's 0.5 at 300) does not make the median look better
    assert should_stop([(100, 0.84)], [A, B], min_trials=2) is None


def test_an_odd_number_of_others_takes_the_middle_one() -> None:
    slow = [(100, 3.0), (200, 3.0)]
    decision = should_stop([(200, 1.0)], [A, B, slow], min_trials=3)
    assert decision is not None and decision.median == pytest.approx(
        0.8
    )  # of 0.7 (B), 0.8 (A), 3.0


def test_maximize_stops_the_trial_below_the_median() -> None:
    acc_a = [(10, 0.5), (20, 0.7)]
    acc_b = [(10, 0.6), (20, 0.8)]
    low = [(10, 0.2), (20, 0.3)]
    decision = should_stop(low, [acc_a, acc_b], minimize=False, min_trials=2)
    assert decision is not None and decision.best == 0.3 and decision.median == pytest.approx(0.65)
    high = [(10, 0.2), (20, 0.9)]
    assert should_stop(high, [acc_a, acc_b], minimize=False, min_trials=2) is None


def test_equal_to_the_median_is_not_worse() -> None:
    halves = [[(100, 0.5)], [(100, 1.0)]]  # median exactly 0.75
    assert should_stop([(100, 0.75)], halves, min_trials=2) is None
    assert should_stop([(100, 0.75)], halves, minimize=False, min_trials=2) is None


def test_a_metric_over_time_is_matched_to_the_step_reported_by_then() -> None:
    steps = [(10.0, 1), (11.0, 2), (13.0, 5)]
    values = [(9.0, 4.0), (10.0, 3.0), (12.0, 2.0), (13.5, 1.0)]
    assert by_step(steps, values) == [(0, 4.0), (1, 3.0), (2, 2.0), (5, 1.0)]
    assert by_step([], values) == [(0, 4.0), (0, 3.0), (0, 2.0), (0, 1.0)]
    assert by_step(steps, []) == []


def test_a_prepared_curve_answers_as_the_series_does_steps_in_any_order() -> None:
    restarted = [(100, 0.9), (200, 0.7), (50, 2.0), (150, 0.8)]  # a new run reported step 50
    curve = Curve(restarted)
    assert curve.last_step == 200
    assert curve.average_upto(40) is None
    assert curve.average_upto(100) == pytest.approx((0.9 + 2.0) / 2)
    assert curve.average_upto(10**9) == pytest.approx((0.9 + 0.7 + 2.0 + 0.8) / 4)
    trial = [(150, 1.5)]
    assert should_stop(trial, [curve, Curve(B)], min_trials=2) == should_stop(
        trial, [restarted, B], min_trials=2
    )


def test_a_curve_grows_point_by_point_as_one_made_at_once() -> None:
    points = [(10, 3.0), (20, 1.0), (5, 4.0), (30, 2.0), (20, 0.5), (1, 9.0)]
    grown = Curve()
    for step, value in points:
        grown.add(step, value)
    whole = Curve(points)
    for step in (0, 1, 4, 5, 10, 19, 20, 29, 30, 99):
        assert grown.average_upto(step) == pytest.approx(whole.average_upto(step)), step
    assert (len(grown), grown.last_step, grown.low, grown.high) == (6, 30, 0.5, 9.0)
    assert grown.average_upto(20) == pytest.approx((3.0 + 1.0 + 4.0 + 0.5 + 9.0) / 5)
