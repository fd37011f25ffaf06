"""Progress read from a job's output: the protocol line, tqdm, Lightning and Hugging Face
Trainer lines as those libraries print them, and the scanner over a growing log."""

from __future__ import annotations

import json

import pytest

from gpuyard.domain.progress_lines import (
    OutputScanner,
    Report,
    parse_sdk_line,
    parse_segment,
)


def test_the_protocol_line_gives_step_total_and_metrics() -> None:
    got = parse_segment("::gpuyard progress step=10 total=100 loss=0.31 acc=9.5e-1")
    assert got == Report(10, 100, {"loss": 0.31, "acc": 0.95}, "protocol")


def test_a_torchrun_rank_label_in_front_of_the_protocol_is_allowed() -> None:
    got = parse_segment("[rank0]: ::gpuyard progress step=3 total=8")
    assert got == Report(3, 8, {}, "protocol")


def test_a_multi_node_jobs_machine_label_in_front_of_the_protocol_is_allowed() -> None:
    """A job on several machines has one log, each line labelled `[nodeN] ` (was ignored)."""
    assert parse_segment("[node1] ::gpuyard progress step=4 total=8") == Report(
        4, 8, {}, "protocol"
    )
    got = parse_segment("[node0] [rank0]: ::gpuyard progress step=5 total=8 loss=0.5")
    assert got == Report(5, 8, {"loss": 0.5}, "protocol")


@pytest.mark.parametrize(
    "line",
    [
        "::gpuyard progress step=10 total=100 loss=abc",  # not a number
        "::gpuyard progress step=1.5 total=10",  # a step is whole
        "::gpuyard progress step=-1",
        "::gpuyard progress step=10 loss",  # not key=value
        "::gpuyard progress step=10 loss=nan",
        "::gpuyard progress step=10 1bad=2",
        "::gpuyard progress",
        "::gpuyard progressstep=1",
        "echo ::gpuyard progress step=1",  # not at the line's start
    ],
)
def test_malformed_protocol_lines_are_ignored_whole(line: str) -> None:
    assert parse_segment(line) is None


def test_a_tqdm_bar_with_postfix() -> None:
    line = "train:  45%|████▌     | 45/100 [00:12<00:15,  3.61it/s, loss=0.300, lr=1e-3, tag=x]"
    assert parse_segment(line) == Report(45, 100, {"loss": 0.3, "lr": 0.001}, "tqdm")


def test_a_tqdm_bar_at_its_start_and_one_without_a_total() -> None:
    assert parse_segment("  0%|          | 0/100 [00:00<?, ?it/s]") == Report(0, 100, {}, "tqdm")
    assert parse_segment("45it [00:12,  3.61it/s]") == Report(45, None, {}, "tqdm")
    assert parse_segment("batches: 7it [00:01,  5.02s/it]") == Report(7, None, {}, "tqdm")


def test_lightning_training_bar_gives_the_epoch_and_drops_v_num() -> None:
    line = "Epoch 3:  45%|████▌     | 45/100 [00:12<00:15,  3.61it/s, v_num=0, train_loss=0.310]"
    assert parse_segment(line) == Report(45, 100, {"train_loss": 0.31, "epoch": 3.0}, "lightning")


@pytest.mark.parametrize(
    "line",
    [
        "Validation DataLoader 0:  50%|█████     | 5/10 [00:00<00:00, 20.00it/s]",
        "Sanity Checking DataLoader 0: 100%|██████████| 2/2 [00:00<00:00, 40.00it/s]",
        "Testing DataLoader 0: 100%|██████████| 2/2 [00:00<00:00, 40.00it/s]",
    ],
)
def test_lightnings_other_bars_are_not_the_trainings_progress(line: str) -> None:
    assert parse_segment(line) is None


def test_hugging_face_trainer_logs_are_metrics() -> None:
    got = parse_segment("{'loss': 0.31, 'grad_norm': 1.5, 'learning_rate': 5e-05, 'epoch': 0.5}")
    assert got == Report(
        None, None, {"loss": 0.31, "grad_norm": 1.5, "learning_rate": 5e-05, "epoch": 0.5}, "hf"
    )
    summary = (
        "{'train_runtime': 12.3, 'train_samples_per_second': 8.1, 'train_loss': 0.4, 'epoch': 1.0}"
    )
    assert parse_segment(summary) is not None


@pytest.mark.parametrize(
    "line",
    [
        "{'loss': 0.31}",  # no epoch: not Trainer's
        "{'epoch': 'one'}",
        "[1, 2, 3]",
        "Downloading [00:01]",
        "x" * 20_000 + " 1/2 [00:00<00:00, 1.0it/s]",
        "{'epoch': __import__('os').system('true')}",  # never evaluated
    ],
)
def test_other_output_is_not_progress(line: str) -> None:
    assert parse_segment(line) is None


def test_the_scanner_reads_carriage_return_updates_once_each() -> None:
    scanner = OutputScanner()
    bar = " {p}%|          | {n}/100 [00:0{n}<01:39,  1.00it/s]"
    got = scanner.feed("\r" + bar.format(p=1, n=1))
    assert [r.step for r in got] == [1]  # the open update is read at once
    got = scanner.feed("\r" + bar.format(p=2, n=2) + "\r  3%|")
    assert [r.step for r in got] == [2]  # 1 not again; the cut-off 3 waits
    got = scanner.feed("          | 3/100 [00:03<01:37,  1.00it/s]\n::gpuyard progress step=5\n")
    assert [r.step for r in got] == [3, 5]


def test_the_scanner_waits_for_a_protocol_lines_end() -> None:
    scanner = OutputScanner()
    assert scanner.feed("::gpuyard progress step=1") == []  # maybe "step=10" once complete
    assert [r.step for r in scanner.feed("0 total=100\n")] == [10]


def test_sdk_lines_are_checked_not_trusted() -> None:
    good = {"t": 1700000000.5, "step": 4, "total": 10, "metrics": {"loss": 0.5, "bad": "x"}}
    assert parse_sdk_line(json.dumps(good).encode()) == Report(
        4, 10, {"loss": 0.5}, "sdk", 1700000000.5
    )
    assert parse_sdk_line(b'{"step": true}') is None
    assert parse_sdk_line(b'{"step": -3}') is None
    assert parse_sdk_line(b"not json") is None
    assert parse_sdk_line(b"[1]") is None
    assert parse_sdk_line(b'{"step": 1, "total": 0, "t": "x"}') == Report(1, None, {}, "sdk", None)
