"""`gpuyard.progress()` inside a job: batched into at most a line a second, a no-op outside
gpuyard, never an exception or a failed job whatever it is given or wherever it writes.
Each case runs in a fresh interpreter, as a job does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path


def _job(code: str, progress_file: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "GPUYARD_PROGRESS_FILE"}
    if progress_file is not None:
        env["GPUYARD_PROGRESS_FILE"] = progress_file
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_many_calls_make_one_line_with_the_latest_step_and_mean_metrics(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    done = _job(
        """
        import gpuyard
        for step in range(1, 1001):
            gpuyard.progress(step, total=1000, loss=float(step), acc=0.5)
        """,
        str(path),
    )
    assert done.returncode == 0, done.stderr
    lines = _lines(path)
    # A thousand calls within well under the 1 s flush period: one line, written at exit.
    assert len(lines) <= 2
    last = lines[-1]
    assert last["step"] == 1000 and last["total"] == 1000
    metrics = last["metrics"]
    assert isinstance(metrics, dict) and metrics["acc"] == 0.5
    assert 1.0 <= metrics["loss"] <= 1000.0


def test_scalars_of_arrays_are_numbers_and_bad_values_are_dropped(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    done = _job(
        """
        import math
        import numpy as np
        import gpuyard

        class Tensor:  # a 0-d torch tensor: float() of it is its value
            def __float__(self): return 0.25

        gpuyard.progress("seven", total=10, loss=1.0)  # no usable step: dropped whole
        gpuyard.progress(np.int64(3), total=np.int64(10), loss=np.float32(0.5), t=Tensor(),
                         bad="text", nan=math.nan, inf=math.inf, flag=True, none=None)
        """,
        str(path),
    )
    assert done.returncode == 0, done.stderr
    (line,) = _lines(path)
    assert line["step"] == 3 and line["total"] == 10
    assert line["metrics"] == {"loss": 0.5, "t": 0.25}


def test_outside_gpuyard_it_does_nothing(tmp_path: Path) -> None:
    done = _job(
        """
        import threading, gpuyard
        gpuyard.progress(1, total=2, loss=0.1)
        assert threading.active_count() == 1, "no writer thread outside gpuyard"
        print("ok")
        """,
        None,
    )
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_file_costs_one_warning_and_never_the_job(tmp_path: Path) -> None:
    blocked = tmp_path / "no-such-folder" / "progress.jsonl"
    done = _job(
        """
        import time, gpuyard
        for step in range(3):
            gpuyard.progress(step, total=3, loss=1.0)
            time.sleep(1.2)  # a flush between calls: three failed writes
        print("trained")
        """,
        str(blocked),
    )
    assert done.returncode == 0 and done.stdout == "trained\n"
    warnings = [line for line in done.stderr.splitlines() if line.startswith("gpuyard:")]
    assert len(warnings) == 1 and "progress not recorded" in warnings[0], done.stderr
    assert "Traceback" not in done.stderr


def test_importing_gpuyard_stays_cheap() -> None:
    done = _job(
        """
        import sys, gpuyard
        heavy = {"threading", "json", "typing", "pathlib", "atexit"} & set(sys.modules)
        print(sorted(heavy - {"threading"}))  # the interpreter itself may load threading
        """,
        None,
    )
    assert done.returncode == 0 and done.stdout == "[]\n", done.stdout + done.stderr


def test_a_forked_child_reports_with_a_writer_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    done = _job(
        """
        import os, gpuyard
        gpuyard.progress(1, total=4)
        pid = os.fork()
        if pid == 0:  # a DataLoader worker, say
            gpuyard.progress(2, total=4, worker=1.0)
            import sys; sys.exit(0)  # at exit its own line is written
        os.waitpid(pid, 0)
        gpuyard.progress(3, total=4)
        """,
        str(path),
    )
    assert done.returncode == 0, done.stderr
    steps = [line["step"] for line in _lines(path)]
    assert 2 in steps and steps[-1] == 3  # the child's own line; the parent's latest last
