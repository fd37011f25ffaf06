"""The terminal's progress and charts (issue 14): sparklines, progress lines, `show`'s chart
fields, `top`'s PROGRESS cell and the footer `wait`/`logs -f` draw on a terminal."""

from __future__ import annotations

import io
import re
import time

import pytest

from gpuyard.cli.live import Footer, JobView, board_table, to_ansi
from gpuyard.cli.progress_format import chart_fields, chart_metric, progress_text, rate_text
from gpuyard.cli.render import job_record
from gpuyard.cli.sparkline import BLOCKS, WIDTH, downsample, sparkline
from gpuyard.cli.top import progress_cell
from gpuyard.client import _query_value

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

PROGRESS = {
    "job_id": 7, "step": 450, "total": 1000, "fraction": 0.45, "rate_per_s": 3.2,
    "eta_s": 171.9, "metrics": {"loss": 0.3124, "acc": 0.91, "lr": 0.0001, "epoch": 3},
    "updated_at": "2026-12-01T18:00:00+00:00", "source": "protocol",
}  # fmt: skip
NOTHING_YET = {
    "job_id": 7, "step": None, "total": None, "fraction": None, "rate_per_s": None,
    "eta_s": None, "metrics": {}, "updated_at": None, "source": None,
}  # fmt: skip


# -- sparklines ------------------------------------------------------------------------------
def test_a_falling_loss_is_drawn_from_the_top_block_to_the_bottom_one() -> None:
    line = sparkline([2.3 * 0.99**i for i in range(500)])
    assert len(line) == WIDTH
    assert line[0] == "█" and line[-1] == "▁"
    assert [BLOCKS.index(c) for c in line] == sorted((BLOCKS.index(c) for c in line), reverse=True)


def test_a_short_series_is_a_cell_per_point_and_a_fixed_scale_is_kept() -> None:
    assert sparkline([0, 50, 100], low=0, high=100) == "▁▅█"
    assert sparkline([10, 10, 10], low=0, high=100) == "▂▂▂"  # a steady 10%: low, not full
    assert sparkline([150, -5], low=0, high=100) == "█▁"  # clamped to the scale


def test_flat_empty_and_unreadable_values() -> None:
    assert sparkline([0.5, 0.5, 0.5]) == "▄▄▄"
    assert sparkline([]) == "" and sparkline([None, float("nan"), float("inf")]) == ""
    assert sparkline([1, None, float("nan"), 3]) == "▁█"


def test_downsampling_averages_runs_and_keeps_a_spike_visible() -> None:
    assert downsample([1, 3, 5, 7], 2) == [2, 6]
    values = [0.0] * 1000
    values[500] = 1000.0
    cells = downsample(values, 40)
    assert len(cells) == 40 and sum(cells) == pytest.approx(1000 / 25)
    line = sparkline(values)
    assert line.count("█") == 1 and set(line) == {"▁", "█"}


# -- progress lines --------------------------------------------------------------------------
def test_progress_line_says_step_total_rate_eta_and_the_latest_metrics() -> None:
    assert progress_text(PROGRESS) == (
        "450/1000 (45%), 3.2 steps/s, ETA 2:51, loss=0.3124 acc=0.91 lr=0.0001"
    )
    no_total = {**PROGRESS, "total": None, "fraction": None, "eta_s": None, "metrics": {}}
    assert progress_text(no_total) == "step 450, 3.2 steps/s"
    assert progress_text(NOTHING_YET) is None and progress_text(None) is None
    assert rate_text(0.08) == "12.5 s/step" and rate_text(None) == "" and rate_text(0) == ""


def test_metric_names_a_job_chose_are_escaped() -> None:
    line = progress_text({**PROGRESS, "metrics": {"x\x1b[2J": 1.5}})
    assert line is not None and "\x1b" not in line and "x\\x1b[2J=1.5" in line


def test_the_chart_metric_is_loss_else_a_loss_else_the_first() -> None:
    assert chart_metric(PROGRESS) == "loss"
    assert chart_metric({"metrics": {"acc": 1.0, "val_loss": 2.0}}) == "val_loss"
    assert chart_metric({"metrics": {"acc": 1.0, "lr": 2.0}}) == "acc"
    assert chart_metric(NOTHING_YET) is None and chart_metric(None) is None


# -- show ------------------------------------------------------------------------------------
LOSS = {"job_id": 7, "series": {"loss": [[1e9 + i, 2.3 * 0.99**i] for i in range(160)]}}
GPUS = {
    "job_id": 7,
    "gpus": [
        {"index": 0, "uuid": "GPU-a", "resolution_s": 1.0,
         "samples": [[1e9 + i, 90.0, 1000.0, 60.0, 200.0] for i in range(50)]},
        {"index": 2, "uuid": "GPU-b", "resolution_s": 1.0,
         "samples": [[1e9 + i, 10.0 if i else None, 1000.0, 60.0, 200.0] for i in range(50)]},
    ],
}  # fmt: skip


def test_show_s_chart_fields_draw_the_loss_and_the_gpus_utilisation() -> None:
    fields = dict(chart_fields(PROGRESS, "loss", LOSS, GPUS))
    assert fields["Progress"] == (
        "450/1000 (45%), 3.2 steps/s, ETA 2:51, loss=0.3124 acc=0.91 lr=0.0001 epoch=3"
    )
    loss = str(fields["LossCurve"])
    assert loss.startswith("█") and loss[WIDTH - 1] == "▁"
    # 160 points in 40 cells: the label says a cell is a mean (min and max are the points')
    assert loss.endswith(" min 0.4653 max 2.3 (loss, each cell a mean of 4 points)")
    util = str(fields["GpuUtilCurve"])
    # the None sample is left out: 99 samples, about 2 a cell
    assert util.endswith(" min 10% max 90% (GPU 0,2, each cell a mean of ~2 points)")
    assert set(util[:WIDTH]) <= {"▄", "▅"}  # 90% and 10% in time order: each cell a mean


def test_another_metric_is_a_metric_curve() -> None:
    acc = {"job_id": 7, "series": {"acc": [[1e9, 0.5], [1e9 + 1, 0.9]]}}
    fields = dict(chart_fields({**PROGRESS, "metrics": {"acc": 0.9}}, "acc", acc, None))
    assert fields["MetricCurve"] == "▁█ min 0.5 max 0.9 (acc)"


def test_nothing_reported_or_an_older_server_adds_no_line() -> None:
    assert chart_fields(None, None, None, None) == []
    assert chart_fields(NOTHING_YET, None, None, {"job_id": 7, "gpus": []}) == []
    no_samples = {"job_id": 7, "gpus": [{"index": 0, "uuid": "", "resolution_s": 0.0,
                                         "samples": []}]}  # fmt: skip
    assert chart_fields(PROGRESS, "loss", {"job_id": 7, "series": {}}, no_samples) == [
        ("Progress", progress_text(PROGRESS, metrics_shown=6))
    ]


def _job() -> dict[str, object]:
    return {
        "id": 7, "name": "train", "owner": "me", "state": "RUNNING", "reason": "None",
        "exit_code": None, "priority": 0, "preemptible": False, "stop_signal": 15,
        "restarts": 0, "attained_gpu_s": 0.0, "command": ["python", "t.py"], "workdir": "/w",
        "num_gpus": 1, "gpus": [0], "cpus": 1, "mem_mib": 1024, "time_limit_s": None,
        "node": "n", "submitted_at": None, "started_at": None, "ended_at": None,
        "runtime_s": 5.0, "log_path": "/w/log",
    }  # fmt: skip


def test_the_record_carries_the_charts_after_run_time_aligned_with_the_rest() -> None:
    plain = job_record(_job()).split("\n")
    shown = job_record(_job(), chart_fields(PROGRESS, "loss", LOSS, GPUS)).split("\n")
    at = next(i for i, line in enumerate(plain) if line.strip().startswith("RunTime:"))
    assert shown[: at + 1] == plain[: at + 1] and shown[at + 4 :] == plain[at + 1 :]
    added = shown[at + 1 : at + 4]
    assert [line.split(":")[0].strip() for line in added] == [
        "Progress", "LossCurve", "GpuUtilCurve"
    ]  # fmt: skip
    assert len({line.index(":") for line in shown if ":" in line[:20]}) == 1


# -- top -------------------------------------------------------------------------------------
def test_top_s_progress_cell() -> None:
    assert progress_cell(PROGRESS) == "████░░░░░░  45% ETA 2:51"
    assert progress_cell({**PROGRESS, "eta_s": None}) == "████░░░░░░  45%"
    assert progress_cell({**PROGRESS, "total": None}) == "step 450"
    assert progress_cell(NOTHING_YET) == "-" and progress_cell(None) == "-"


# -- the footer of wait / logs -f --------------------------------------------------------------
def _view(job: dict[str, object], progress: dict[str, object] | None = None) -> JobView:
    view = JobView(int(str(job["id"])))
    view.job, view.job_at = job, time.monotonic()
    view.progress, view.progress_at = progress, time.monotonic()
    return view


def test_the_board_shows_a_bar_with_eta_and_metrics_or_the_state_and_its_time() -> None:
    running = _view({"id": 7, "name": "train", "state": "RUNNING", "runtime_s": 42.0,
                     "started_at": "x"}, PROGRESS)  # fmt: skip
    quiet = _view({"id": 8, "name": "x\x1b[2J", "state": "RUNNING", "runtime_s": 42.0,
                   "started_at": "x"}, NOTHING_YET)  # fmt: skip
    pending = _view({"id": 9, "name": "later", "state": "PENDING", "reason": "Resources",
                     "submitted_at": "2026-01-01T00:00:00+00:00"})  # fmt: skip
    done = _view({"id": 10, "name": "d", "state": "FAILED", "runtime_s": 62.0,
                  "started_at": "x"})  # fmt: skip
    views = [running, quiet, pending, done]
    for width in (160, 100, 60):
        text = to_ansi(board_table(views, 3, time.monotonic()), width)
        lines = ANSI.sub("", text).split("\n")
        assert len(lines) == 5 and all(len(line) <= width for line in lines)
    text = ANSI.sub("", to_ansi(board_table(views, 3, time.monotonic()), 160))
    first, second, third, fourth, more = text.split("\n")
    assert "job 7 train" in first and "━" in first
    assert "450/1000 (45%)  3.2 steps/s  ETA 2:5" in first and "loss=0.3124 acc=0.91" in first
    assert "job 8 x\\x1b[2J" in second and "RUNNING 0:42" in second
    assert "PENDING (Resources)" in third
    assert fourth.startswith("✗") and "FAILED in 1:02" in fourth
    assert "… and 3 more jobs" in more


def test_the_footer_erases_what_it_drew_and_nothing_else() -> None:
    out = io.StringIO()
    footer = Footer(out)
    footer.start()
    footer.draw("a\nb")
    footer.draw("c")
    footer.hide()
    footer.hide()  # nothing drawn: nothing erased
    footer.draw("d")
    footer.close(keep=True)
    assert out.getvalue() == (
        "\x1b[?25l" + "a\nb" + "\r\x1b[2K\x1b[1A\x1b[2K" + "c" + "\r\x1b[2K" + "d" + "\n\x1b[?25h"
    )
    out = io.StringIO()
    footer = Footer(out)
    footer.draw("x")
    footer.close(keep=False)
    assert out.getvalue() == "x\r\x1b[2K\x1b[?25h"


def test_metric_names_are_percent_encoded_in_the_series_query() -> None:
    assert _query_value("loss,val loss,a/b&c=d,é") == "loss,val%20loss,a%2Fb%26c%3Dd,%C3%A9"
