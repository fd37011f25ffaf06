"""Progress from today's defaults, read as those libraries really write it: Lightning's
RichProgressBar (to a log file and to a terminal), transformers 5's logged dicts (floats as
strings) and tqdm's `unit_scale` counts. The Rich lines are bytes a real `Trainer.fit` wrote
(pytorch-lightning 2.6, rich 15); the tqdm lines come from tqdm's own formatter."""

from __future__ import annotations

import pytest

from gpuyard.domain.progress_lines import OutputScanner, Report, parse_segment

BAR = "━" * 17
# What RichProgressBar leaves in a log file (not a terminal): its last state, once, at the end.
RICH_IN_A_FILE = (
    "`Trainer.fit` stopped: `max_epochs=2` reached.\n"
    f"Epoch 1/1  {BAR} 16/16 0:00:00 • 0:00:00 38.89it/s train_loss: 0.212\n"
)
# The same with more metrics than 80 columns hold: Rich wraps the metrics column.
PAD = " " * 63
RICH_WRAPPED = (
    f"Epoch 1/1  {BAR} 16/16 0:00:00 • 0:00:00 30.32it/s v_num: 0.000     \n"
    f"{PAD}train_loss: 1.431\n{PAD}lr_metric: 0.100 \n{PAD}another_long_met…\n{PAD}1.500      \n"
)


def rich_refresh(n: int, loss: str, eta: str = "0:00:01") -> str:
    """One refresh as Rich writes it where it takes the output for a terminal (a pty, or
    TTY_COMPATIBLE=1): return, erase the line, the row with its colour codes."""
    done = "\x1b[35m" + "━" * n + "\x1b[0m\x1b[90m╺" + "━" * (16 - n) + "\x1b[0m"
    return (
        f"\r\x1b[2KEpoch 0/1  {done} {n}/16 \x1b[2m0:00:00 • {eta}\x1b[0m "
        f"\x1b[2;4m36.73it/s\x1b[0m \x1b[3mtrain_loss: {loss}\x1b[0m"
    )


def test_lightnings_rich_bar_in_a_log_file_gives_its_step_total_epoch_and_metrics() -> None:
    got = OutputScanner().feed(RICH_IN_A_FILE)
    assert got == [Report(16, 16, {"train_loss": 0.212, "epoch": 1.0}, "lightning")]


def test_rich_rows_wrapped_metrics_are_read_with_the_row_even_across_reads() -> None:
    want = {"train_loss": 1.431, "lr_metric": 0.1, "epoch": 1.0}  # v_num is not a metric
    (got,) = OutputScanner().feed(RICH_WRAPPED)
    assert (got.step, got.total, got.metrics) == (16, 16, want)
    for cut in (120, 150, 200):  # a read that ends inside the wrapped lines
        scanner = OutputScanner()
        reports = scanner.feed(RICH_WRAPPED[:cut]) + scanner.feed(RICH_WRAPPED[cut:])
        merged: dict[str, float] = {}
        for report in reports:
            assert (report.step, report.total) == (16, 16)
            merged.update(report.metrics)
        assert merged == want, cut


def test_rich_refreshes_on_a_terminal_are_read_as_they_come_once_each() -> None:
    scanner = OutputScanner()
    assert scanner.feed("\x1b[?25l" + rich_refresh(1, "0.242", "-:--:--")) == [
        Report(1, 16, {"train_loss": 0.242, "epoch": 0.0}, "lightning")
    ]  # the open refresh is read at once
    got = scanner.feed(rich_refresh(2, "0.711") + rich_refresh(3, "0.614"))
    assert [(r.step, r.metrics["train_loss"]) for r in got] == [(2, 0.711), (3, 0.614)]


def test_a_rich_row_with_an_unknown_total_and_the_rows_of_other_loops() -> None:
    got = parse_segment(f"Epoch 4  {BAR} 120/-- 0:01:00 • -:--:-- 2.00it/s loss: 0.5")
    assert got == Report(120, None, {"loss": 0.5, "epoch": 4.0}, "lightning")
    # Lightning's other loops' rows are not the training's progress.
    for loop in ("Validation", "Sanity Checking", "Testing", "Predicting"):
        row = f"{loop} DataLoader 0 {BAR} 5/10 0:00:00 • 0:00:01 20.00it/s"
        assert parse_segment(row) is None, row


def test_transformers_5_logs_floats_as_strings_and_they_are_metrics() -> None:
    line = "{'loss': '0.4321', 'grad_norm': '1.23', 'learning_rate': '4.9e-05', 'epoch': '0.5'}"
    assert parse_segment(line) == Report(
        None,
        None,
        {"loss": 0.4321, "grad_norm": 1.23, "learning_rate": 4.9e-05, "epoch": 0.5},
        "hf",
    )
    evaluation = (
        "{'eval_loss': '0.3', 'eval_runtime': '1.2', 'eval_steps_per_second': '8', 'epoch': '1'}"
    )
    assert parse_segment(evaluation) == Report(
        None,
        None,
        {"eval_loss": 0.3, "eval_runtime": 1.2, "eval_steps_per_second": 8.0, "epoch": 1.0},
        "hf",
    )
    # Strings that are not numbers (transformers' own `[String too long ...]`, nan) are dropped.
    odd = "{'loss': 'nan', 'note': '[String too long to display]', 'step': 3, 'epoch': '0.25'}"
    assert parse_segment(odd) == Report(None, None, {"step": 3.0, "epoch": 0.25}, "hf")


tqdm = pytest.importorskip("tqdm")


@pytest.mark.parametrize(
    ("n", "total", "step", "want_total"),
    [
        (1203, 10_000, 1200, 10_000),  # `1.20k/10.0k`
        (3_404_000, 12_000_000, 3_400_000, 12_000_000),  # `3.40M/12.0M`
        (45, 100, 45, 100),  # `45.0/100`
        (0, 2_500, 0, 2_500),  # `0.00/2.50k`
    ],
)
def test_tqdms_unit_scaled_counts_are_read(n: int, total: int, step: int, want_total: int) -> None:
    line = tqdm.tqdm.format_meter(n, total, 12.0, unit_scale=True, prefix="train")
    got = parse_segment(line)
    assert got is not None and (got.step, got.total, got.source) == (step, want_total, "tqdm"), line


def test_a_unit_scaled_bar_without_a_total_and_in_bytes() -> None:
    counter = tqdm.tqdm.format_meter(3_404_000, None, 1.0, unit_scale=True, unit="B")
    assert counter.startswith("3.40MB [")  # the form read: `3.40MB [00:01, 3.40MB/s]`
    assert parse_segment(counter) == Report(3_400_000, None, {}, "tqdm")
    kib = tqdm.tqdm.format_meter(1536, 4096, 1.0, unit_scale=True, unit_divisor=1024)
    got = parse_segment(kib)  # `1.50k/4.00k`: 1500 of 4000, the same fraction as 1536/4096
    assert got is not None and got.step / (got.total or 1) == 1536 / 4096, kib
