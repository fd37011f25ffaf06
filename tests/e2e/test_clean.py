"""`gpuyard clean` as a user types it: finished jobs' records and folders go, pending and
running jobs and their folders stay, `--older-than` keeps recent ones, bad input is one line."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.server import ServerProcess


def _ids(server: ServerProcess) -> list[int]:
    return [job["id"] for job in json.loads(server.cli("queue", "--all", "--json").stdout)]


def test_clean_purges_finished_jobs_and_their_folders_only(server: ServerProcess) -> None:
    finished = [server.cli("submit", "--", "sh", "-c", c).stdout.strip()
                for c in ("echo one", "exit 3")]  # fmt: skip
    server.cli("wait", *finished, check=False)
    running = server.cli("submit", "--gpus", "4", "--", "sleep", "60").stdout.strip()
    pending = server.cli("submit", "--gpus", "4", "--", "echo", "later").stdout.strip()
    jobs_dir = server.state_dir / "jobs"
    assert all((jobs_dir / i).is_dir() for i in (*finished, running))
    assert server.cli("clean", "--older-than", "1h").stdout == "cleaned 0 finished jobs\n"
    assert server.cli("clean").stdout == "cleaned 2 finished jobs\n"
    assert _ids(server) == [int(running), int(pending)]
    assert not any((jobs_dir / i).exists() for i in finished)
    assert (jobs_dir / running).is_dir()
    gone = server.cli("show", finished[0], check=False)
    assert gone.returncode == 1 and f"job {finished[0]} not found" in gone.stderr
    server.cli("cancel", running)
    server.cli("wait", pending, check=False)
    assert server.cli("logs", pending).stdout == "later\n"
    newer = server.cli("submit", "--", "true").stdout.strip()
    assert int(newer) == int(pending) + 1


def test_clean_with_a_bad_duration_is_one_line(server: ServerProcess, tmp_path: Path) -> None:
    bad = server.cli("clean", "--older-than", "soon", check=False)
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1
    assert bad.stderr.startswith("gpuyard: ") and "soon" in bad.stderr
    assert "Traceback" not in bad.stderr
