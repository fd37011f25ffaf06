"""`make run`'s demo (scripts/demo.sh) works: the example training jobs queue, run and complete,
the server's own log goes to a file the demo names (not between the jobs' output), and the
server is left serving.

Run on this test's own port, state dir, Unix socket and log file, never the machine's
defaults (a root server on /run/gpuyard/gpuyard.sock would take over another server's local
users). It waits for the demo's lines, not for a time: pytest's timeout is the only deadline.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gpuyard.locations import DEFAULT_SOCKET
from tests.e2e.server import free_port

REPO = Path(__file__).resolve().parents[2]
# Three small CPU training runs and a torch import each: minutes on a loaded 2-core machine.
pytestmark = pytest.mark.timeout(1200)


def _section(output: str, header: str) -> list[str]:
    """The lines the demo printed under its `== header` line, up to the next one."""
    start = output.index(f"== {header}\n") + len(header) + 4
    end = output.find("\n== ", start)
    return output[start : end if end >= 0 else None].splitlines()


def test_demo_runs_the_example_jobs_and_keeps_serving(tmp_path: Path) -> None:
    port = free_port()
    sock, server_log = tmp_path / "run" / "gpuyard.sock", tmp_path / "server.log"
    env = dict(os.environ)
    env.update(
        GPUYARD_PORT=str(port),
        GPUYARD_URL=f"http://127.0.0.1:{port}",
        GPUYARD_STATE_DIR=str(tmp_path / "state"),
        GPUYARD_SOCKET=str(sock),
        GPUYARD_SERVER_LOG=str(server_log),
        PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}",
    )
    env.pop("GPUYARD_TOKEN", None)
    proc = subprocess.Popen(
        [str(REPO / "scripts" / "demo.sh")], cwd=REPO, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(re.sub(r"\x1b\[[0-9;]*m", "", line))
            if "gpuyard server is running at" in line:
                break
        output = "".join(lines)
        assert "gpuyard server is running at" in output, output[-3000:]
        assert "step 1500/1500" in output and "done: final loss" in output
        final_queue = output[output.rindex("gpuyard queue --all") :]
        assert final_queue.count("COMPLETED") == 3, final_queue
        assert proc.poll() is None, "the server must keep running in the foreground"
        # The server's log is in the file the demo names; its lines are not in the jobs' output.
        assert f"its log: {server_log}" in output
        said = server_log.read_text()
        assert "gpuyard server listening on" in said
        follow_header = next(h for h in output.splitlines() if h.startswith("== gpuyard logs -f"))
        followed = _section(output, follow_header[3:])
        assert followed and all(
            line.startswith(("job ", "step ", "done: ", "checkpoint saved")) for line in followed
        ), followed
        if os.geteuid() == 0:  # a root server listens for local users: here, on the test's
            assert f"local users: {sock}" in said and DEFAULT_SOCKET not in said
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
