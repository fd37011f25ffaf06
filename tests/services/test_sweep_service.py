"""The sweep service over a real server (real SQLite, real supervisors, real progress files):
a sweep's definition and its early stop outlive a server restart under a running trial."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

from gpuyard.bootstrap import build_server
from gpuyard.domain.job import Job
from gpuyard.domain.states import JobState
from gpuyard.services.server import ServerFacade
from gpuyard.settings import Settings

TRAIN = textwrap.dedent(
    """
    import os, time
    x = float(os.environ["SWEEP_X"])
    steps, pause = (40, 0.1) if x < 1 else (100, 0.3)  # the bad trial would run 30 s
    for step in range(1, steps + 1):
        print(f"::gpuyard progress step={step} val_loss={x + 1 / step:.4f}", flush=True)
        time.sleep(pause)
    """
)


def _settings(tmp_path: Path) -> Settings:
    return Settings(state_dir=tmp_path / "state", gpus="2", cpus=4, kill_grace_s=1)


def _task(server: ServerFacade, job_id: int) -> Job:
    return server.reads.get(job_id, server.auth.principal)


def _until(what: str, check: object, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_a_sweeps_early_stop_goes_on_after_a_restart(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    definition = {
        "name": "restart",
        "command": [sys.executable, "train.py"],
        "resources": {"gpus": 1},
        # Two short good trials on the two GPUs, then a long bad one, judged from step 20.
        "parameters": {"x": [0.1, 0.2, 2.0]},
        "metric": {"name": "val_loss"},
        "early_stop": {"rule": "median", "min_steps": 20, "min_trials": 2},
    }
    server = build_server(_settings(tmp_path))
    try:
        server.start()
        assert server.sweeps is not None
        record, tasks = server.sweeps.submit(definition, server.auth.principal, str(tmp_path))
        assert [t.array_task_id for t in tasks] == [0, 1, 2] and record.id == tasks[0].id
        bad = tasks[2].id
        # The good trials run first (two GPUs), then the bad one; it is judged from step 20
        # (6 s in): after the restart.
        _until("the bad trial started", lambda: _task(server, bad).state is JobState.RUNNING)
    finally:
        server.close()  # the bad trial runs on under its supervisor
    again = build_server(_settings(tmp_path))
    try:
        again.start()
        assert again.sweeps is not None
        record = again.sweeps.get(record.id, again.auth.principal)
        _until("the bad trial ended", lambda: _task(again, bad).state.is_terminal)
        ranked = again.sweeps.trials(record)
        assert [t.params["x"] for t in ranked] == [0.1, 0.2, 2.0]
        states = [(t.job.state, t.job.reason) for t in ranked if t.job is not None]
        assert states[:2] == [(JobState.COMPLETED, "None")] * 2, states
        assert states[2][0] is JobState.CANCELLED, states
        assert states[2][1].startswith("EarlyStopped: val_loss 2.0"), states
        assert "at step 2" in states[2][1] and 20 <= (ranked[2].step or 0) < 100, states
    finally:
        again.close()
