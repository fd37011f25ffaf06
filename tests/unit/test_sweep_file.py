"""The sweep file (`domain/sweep.py`): what it may say, grid and seeded random expansion, how a
trial gets its parameters, and one-line errors naming the key (and, in the CLI, the line)."""

from __future__ import annotations

import math
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from gpuyard.domain.errors import InvalidRequest
from gpuyard.domain.spec_rules import decide_spec
from gpuyard.domain.sweep import EarlyStop, Metric, line_of, parse_sweep

GPUYARD = str(Path(sys.executable).with_name("gpuyard"))
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sweep.toml"


def _doc(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"command": "python3 train.py --lr {lr}", "parameters": {"lr": [0.1]}}
    doc.update(changes)
    return doc


def _refused(doc: Any) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        parse_sweep(doc)
    return caught.value


def test_a_grid_runs_every_combination_first_parameter_slowest() -> None:
    sweep = parse_sweep(_doc(parameters={"lr": [0.1, 0.01], "layers": [2, 4], "opt": ["adam"]}))
    assert sweep.expand() == [
        {"lr": 0.1, "layers": 2, "opt": "adam"},
        {"lr": 0.1, "layers": 4, "opt": "adam"},
        {"lr": 0.01, "layers": 2, "opt": "adam"},
        {"lr": 0.01, "layers": 4, "opt": "adam"},
    ]


def test_a_trial_gets_its_parameters_in_the_command_the_environment_and_as_arguments() -> None:
    sweep = parse_sweep(
        _doc(
            command=["python3", "train.py", "--lr={lr}", "--seed", "{trial}"],
            parameters={"lr": [0.1, 0.01], "fast": [True]},
            args=True,
            env={"WANDB_MODE": "offline"},
            max_running=2,
            resources={"gpus": 1, "mem": "8G", "time": "2h", "preemptible": True},
            name="lr",
        )
    )
    trials = sweep.expand()
    draft = sweep.draft(1, trials[1], "/work")
    assert draft.argv == (
        "python3", "train.py", "--lr=0.01", "--seed", "1", "--lr", "0.01", "--fast", "true",
    )  # fmt: skip
    assert dict(draft.env) == {
        "WANDB_MODE": "offline", "SWEEP_LR": "0.01", "SWEEP_FAST": "true", "SWEEP_TRIAL": "1",
    }  # fmt: skip
    spec = decide_spec(draft, default_workdir="/home/ada")
    assert (spec.gpus, spec.mem_mib, spec.time_limit_s, spec.preemptible) == (1, 8192, 7200, True)
    assert (spec.name, spec.workdir, spec.array_max_running) == ("lr", "/work", 2)


def test_random_draws_are_seeded_in_range_and_of_the_right_kind() -> None:
    doc = _doc(
        method="random", trials=50, seed=7,
        parameters={
            "lr": {"distribution": "loguniform", "min": 1e-5, "max": 1e-1},
            "dropout": {"distribution": "uniform", "min": 0.0, "max": 0.5},
            "batch": {"distribution": "int", "min": 16, "max": 20},
            "opt": {"distribution": "choice", "values": ["adam", "sgd"]},
            "layers": [2, 4],
        },
    )  # fmt: skip
    trials = parse_sweep(doc).expand()
    assert len(trials) == 50
    assert trials == parse_sweep(doc).expand()  # the same file, the same trials
    assert trials != parse_sweep({**doc, "seed": 8}).expand()
    for t in trials:
        assert 1e-5 <= t["lr"] <= 1e-1 and isinstance(t["lr"], float)
        assert 0.0 <= t["dropout"] <= 0.5
        assert t["batch"] in range(16, 21) and isinstance(t["batch"], int)
        assert t["opt"] in ("adam", "sgd") and t["layers"] in (2, 4)
    assert {t["batch"] for t in trials} == set(range(16, 21))  # both ends drawn
    # loguniform: as many draws per decade, not nearly all in the top one
    low = sum(1 for t in trials if float(t["lr"]) < 1e-3)
    assert 10 <= low <= 40


def test_metric_and_early_stop_defaults() -> None:
    sweep = parse_sweep(_doc(metric={"name": "val_loss"}, early_stop={"rule": "median"}))
    assert sweep.metric == Metric("val_loss", "minimize")
    assert sweep.early_stop == EarlyStop("median", 0, 3)
    assert sweep.max_running == 0 and sweep.method == "grid"


@pytest.mark.parametrize(
    ("doc", "field", "words"),
    [
        (_doc(command=""), "command", "empty"),
        (_doc(command=None), "command", "missing"),
        (_doc(command="python3 t.py {nope}"), "command", "{nope} names no parameter"),
        (_doc(parameters={}), "parameters", "at least one"),
        (_doc(parameters={"lr": []}), "parameters.lr", "non-empty list"),
        (_doc(parameters={"bad name": [1]}), "parameters.bad name", "word"),
        (_doc(parameters={"lr": {"distribution": "uniform", "min": 0, "max": 1}}),
         "parameters.lr", 'method = "random"'),
        (_doc(method="random", trials=2,
              parameters={"lr": {"distribution": "loguniform", "min": 0, "max": 1}}),
         "parameters.lr.min", "above 0"),
        (_doc(method="random", trials=2,
              parameters={"lr": {"distribution": "uniform", "min": 1, "max": 1}}),
         "parameters.lr.max", "more than min"),
        (_doc(method="random", trials=2,
              parameters={"lr": {"distribution": "int", "min": 1.5, "max": 3}}),
         "parameters.lr.min", "whole numbers"),
        (_doc(method="random", trials=2,
              parameters={"lr": {"distribution": "normal", "min": 1, "max": 3}}),
         "parameters.lr.distribution", "one of"),
        (_doc(method="random"), "trials", "missing"),
        (_doc(trials=3), "trials", "grid"),
        (_doc(method="bayes"), "method", "one of"),
        (_doc(max_running=-1), "max_running", "out of range"),
        (_doc(resources={"gpu": 1}), "resources.gpu", "unknown resource"),
        (_doc(resources={"mem": "lots"}), "resources.mem", "bad size"),
        (_doc(resources={"time": "forever"}), "resources.time", "bad duration"),
        (_doc(metric={"name": "val_loss", "goal": "lowest"}), "metric.goal", "one of"),
        (_doc(early_stop={"rule": "median"}), "early_stop", "needs a [metric]"),
        (_doc(early_stop={"rule": "hyperband"}, metric={"name": "x"}), "early_stop.rule",
         "one of"),
        (_doc(env={"SWEEP_LR": "1"}), "env.SWEEP_LR", "parameters"),
        (_doc(color="blue"), "color", "unknown key"),
        (_doc(command="x", parameters={"a": list(range(200)), "b": list(range(200))}), "parameters",
         "40000 trials"),
    ],
)  # fmt: skip
def test_a_bad_file_is_one_line_naming_the_key(doc: Any, field: str, words: str) -> None:
    error = _refused(doc)
    assert error.field == field
    assert words in error.message and "\n" not in error.message


def test_nothing_a_client_sends_breaks_the_parser() -> None:
    huge = {"distribution": "int", "min": 1, "max": 10**400}
    for doc in ([], "x", {"command": 3, "parameters": 4}, _doc(resources=[1]),
                _doc(seed=True), _doc(parameters={"lr": [float("nan")]}),
                _doc(method="random", trials=1, parameters={"lr": huge})):  # fmt: skip
        _refused(doc)


def test_the_error_points_at_the_files_line() -> None:
    text = EXAMPLE.read_text()
    lines = text.splitlines()
    for key, expect in [
        ("parameters.lr.min", "lr = {"), ("early_stop.min_trials", "min_trials ="),
        ("trials", "trials ="), ("resources.mem", "mem ="), ("metric.goal", "goal ="),
    ]:  # fmt: skip
        line = line_of(text, key)
        assert line is not None and lines[line - 1].lstrip().startswith(expect), key


def test_the_example_file_parses_and_the_cli_says_the_line_of_a_mistake(tmp_path: Path) -> None:
    parse_sweep(tomllib.loads(EXAMPLE.read_text()))
    bad = tmp_path / "sweep.toml"
    bad.write_text(
        'command = "python3 t.py"\n[parameters]\nlr = [0.1]\n[resources]\ngpus = 1\nmem = "x"\n'
    )
    run = subprocess.run(
        [GPUYARD, "sweep", str(bad)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode != 0
    assert run.stderr.startswith(f"gpuyard: {bad}, line 6: resources.mem: bad size 'x'")
    assert run.stderr.count("\n") == 1


def test_dry_run_prints_the_trials_without_a_server(tmp_path: Path) -> None:
    run = subprocess.run(
        [GPUYARD, "sweep", str(EXAMPLE), "--dry-run"],
        capture_output=True, text=True, timeout=60, env={"GPUYARD_URL": "http://127.0.0.1:9"},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "6 trials (random); nothing queued" in run.stdout
    assert math.isfinite(float(run.stdout.splitlines()[1].split()[1].split("=")[1]))


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["show"], "gpuyard: give the sweep's id: gpuyard sweep show ID\n"),
        (["show", "x1"], "gpuyard: 'x1' is not a sweep id (a number, as `sweep list` shows)\n"),
        (["a.toml", "b"], "gpuyard: unexpected 'b': gpuyard sweep FILE | show ID | list\n"),
    ],
)
def test_a_usage_mistake_is_one_line(args: list[str], said: str) -> None:
    run = subprocess.run([GPUYARD, "sweep", *args], capture_output=True, text=True, timeout=60)
    assert (run.returncode, run.stderr, run.stdout) == (2, said, "")
