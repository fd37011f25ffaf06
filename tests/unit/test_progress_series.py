"""The bounded timeline of a job's progress: merges within a bucket, halves when full, and
downsamples on read."""

from __future__ import annotations

from gpuyard.domain.progress_series import ProgressPoint, Timeline, downsample


def test_reports_in_one_bucket_merge_metrics_as_their_mean() -> None:
    timeline = Timeline()
    timeline.add(100.0, 1, 10, {"loss": 4.0})
    timeline.add(100.4, 2, 10, {"loss": 2.0})
    timeline.add(101.2, 3, 10, {"loss": 1.0})
    assert timeline.points == [
        ProgressPoint(100.0, 2, 10, {"loss": 3.0}),
        ProgressPoint(101.2, 3, 10, {"loss": 1.0}),
    ]


def test_a_long_job_stays_bounded_and_spans_its_whole_run() -> None:
    timeline = Timeline(max_points=100)
    for t in range(10_000):
        timeline.add(float(t), t, 10_000, {"loss": 1.0})
    assert 50 <= len(timeline.points) <= 100
    assert timeline.points[0].at == 0.0
    assert timeline.points[-1].step == 9_999  # the latest step is never merged away
    assert all(p.metrics == {"loss": 1.0} for p in timeline.points)
    gaps = {b.at - a.at for a, b in zip(timeline.points, timeline.points[1:], strict=False)}
    assert max(gaps) <= 4 * min(gaps)  # evenly spread, old and new alike


def test_changes_are_taken_once_and_a_compaction_replaces_everything() -> None:
    timeline = Timeline(max_points=4)
    for t in range(4):
        timeline.add(float(t), t, None, {})
    changed, whole = timeline.take_changes()
    assert [p.at for p in changed] == [0.0, 1.0, 2.0, 3.0] and not whole
    assert timeline.take_changes() == ([], False)
    timeline.add(4.0, 4, None, {})  # the fifth point: the timeline halves
    changed, whole = timeline.take_changes()
    assert whole and [p.step for p in changed] == [1, 3, 4]


def test_series_by_name_and_downsampled() -> None:
    timeline = Timeline()
    for t in range(10):
        timeline.add(float(t), t, 10, {"loss": float(10 - t)} if t % 2 else {})
    series = timeline.series(None, 500)
    assert [v for _, v in series["step"]] == [float(t) for t in range(10)]
    assert [v for _, v in series["loss"]] == [9.0, 7.0, 5.0, 3.0, 1.0]
    assert set(timeline.series(["loss"], 500)) == {"loss"}
    assert len(timeline.series(None, 3)["step"]) == 3


def test_downsample_keeps_the_last_value_and_averages_runs() -> None:
    values = [(float(t), float(t)) for t in range(9)]
    assert downsample(values, 5) == [(0.0, 0.5), (2.0, 2.5), (4.0, 4.5), (6.0, 6.5), (8.0, 8.0)]
    assert downsample(values, 100) == values
    assert downsample(values, 1) == [(8.0, 8.0)]
