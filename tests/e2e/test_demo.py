"""`make run`'s demo (scripts/demo.sh) works: the example training jobs queue, run and complete,
and the server is left serving."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.e2e.server import free_port

REPO = Path(__file__).resolve().parents[2]


def test_demo_runs_the_example_jobs_and_keeps_serving(tmp_path: Path) -> None:
    port = free_port()
    env = dict(os.environ)
    env.update(
        GPUYARD_PORT=str(port),
        GPUYARD_URL=f"http://127.0.0.1:{port}",
        GPUYARD_STATE_DIR=str(tmp_path / "state"),
        PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}",
    )
    env.pop("GPUYARD_TOKEN", None)
    proc = subprocess.Popen(
        [str(REPO / "scripts" / "demo.sh")], cwd=REPO, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    lines: list[str] = []
    deadline = time.monotonic() + 240
    try:
        assert proc.stdout is not None
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "gpuyard server is running at" in line:
                break
        output = "".join(lines)
        assert "gpuyard server is running at" in output, output[-3000:]
        assert "step 1500/1500" in output and "done: final loss" in output
        final_queue = output[output.rindex("gpuyard queue --all") :]
        assert final_queue.count("COMPLETED") == 3, final_queue
        assert proc.poll() is None, "the server must keep running in the foreground"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
