"""A full log disk (issue 12): the job runs on and its writes never fail (its output goes
through its supervisor, which drops what the disk refuses and counts it); once the disk has
room again the log says how much is missing; the job's record carries the count
(`log_dropped_bytes`) and `gpuyard show` says so. A real small filesystem: a 1 MiB tmpfs
mounted (as root) on the server's jobs folder, unmounted after. And a supervisor that dies
does not leave its job writing into a pipe nobody reads: the job's next write ends it."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.executor_rig import Rig
from tests.e2e.server import ServerProcess, pid_alive, wait_ended, wait_for
from tests.small_disk import small_disk

LINES, LINE = 2000, "0" * 500 + "\n"  # ~1 MB of output: more than the disk has left
AFTER = "after: the disk had room again\n"
# `head`'s writes are the job's own: one that failed would fail the job (set -e, pipefail).
PRINTS = f"""\
set -e
yes "$(printf '%0500d' 0)" | head -n {LINES}
touch "$PRINTED"
while [ ! -e "$GO" ]; do sleep 0.05; done
printf '{AFTER}'
"""
NOTE = re.compile(
    rb"\n?gpuyard: \*\*\* log truncated: (\d+) bytes lost, the disk was full \*\*\*\n"
)


@pytest.fixture
def small_jobs_disk(tmp_path: Path) -> Iterator[Path]:
    """The server's state dir, whose jobs folder is a 1 MiB tmpfs."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    with small_disk(state / "jobs", size_mib=1):
        yield state


def test_a_job_runs_on_through_a_full_log_disk_and_its_log_says_what_was_lost(
    small_jobs_disk: Path, tmp_path: Path
) -> None:
    server = ServerProcess(small_jobs_disk, "--gpus", "0", "--cpus", "4", "--kill-grace", "1")
    server.start()
    try:
        jobs = small_jobs_disk / "jobs"
        filler = jobs / "filler"
        filler.write_bytes(b"f" * (512 << 10))  # about half the disk: the job's output won't fit
        printed, go = tmp_path / "printed", tmp_path / "go"
        script = tmp_path / "prints.sh"
        script.write_text(PRINTS)
        client = server.client()
        job = client.submit(
            ["sh", str(script)], env={"PRINTED": str(printed), "GO": str(go)}, workdir="/"
        )
        wait_for(printed.exists, timeout_s=60)
        assert client.job(job["id"])["state"] == "RUNNING"  # its writes did not fail it
        filler.unlink()
        go.touch()
        done = wait_ended(client, job["id"], 60)
        assert (done["state"], done["exit_code"]) == ("COMPLETED", 0), done["reason"]
        lost = done["log_dropped_bytes"]
        assert lost > 0
        shown = server.cli("show", str(job["id"])).stdout
        assert f"log truncated ({lost} bytes not kept: see the line in the log)" in shown
        log = Path(done["log_path"]).read_bytes()
        notes = list(NOTE.finditer(log))
        assert notes and sum(int(n.group(1)) for n in notes) == lost
        assert log.endswith(AFTER.encode()) and notes[-1].end() <= len(log) - len(AFTER)
        # What the log holds of the job's output and what it lost add up to what it printed.
        kept = len(log) - sum(len(n.group(0)) for n in notes)
        assert kept + lost == LINES * len(LINE) + len(AFTER)
    finally:
        server.stop()
        server.kill_jobs()


def test_the_end_of_a_job_is_recorded_on_a_disk_still_full(
    small_jobs_disk: Path, tmp_path: Path
) -> None:
    """The status file's room is taken as the job starts: a job that fills the disk and ends
    while it is still full still ends COMPLETED (not lost), with what its log lost."""
    server = ServerProcess(small_jobs_disk, "--gpus", "0", "--cpus", "4", "--kill-grace", "1")
    server.start()
    try:
        jobs = small_jobs_disk / "jobs"
        (jobs / "filler").write_bytes(b"f" * (512 << 10))
        client = server.client()
        job = client.submit(["sh", "-c", f'set -e; yes "$(printf "%0500d" 0)" | head -n {LINES}'])
        done = wait_ended(client, job["id"], 60)
        assert os.statvfs(jobs).f_bavail == 0  # still full: no room was made for the end
        assert (done["state"], done["exit_code"]) == ("COMPLETED", 0), done["reason"]
        assert done["log_dropped_bytes"] > 0
        assert not NOTE.search(Path(done["log_path"]).read_bytes())  # no room for it either
    finally:
        server.stop()
        server.kill_jobs()


def test_a_job_whose_supervisor_died_is_ended_by_its_next_write(tmp_path: Path) -> None:
    """With no server to end it (the executor closed), a job writing output does not go on
    for ever once its supervisor is killed: the pipe has no reader, its write gets SIGPIPE."""
    rig = Rig(tmp_path)
    pid_file = tmp_path / "pid"
    job = rig.start(1, f"echo $$ > {pid_file}; exec yes", env={})
    try:
        wait_for(lambda: pid_file.exists() and os.path.getsize(rig.executor.log_path(1)) > 4096)
        writer = int(pid_file.read_text())
        rig.executor.close()
        assert job.pid is not None
        os.kill(job.pid, signal.SIGKILL)
        wait_for(lambda: not pid_alive(writer), timeout_s=10)
    finally:
        with_pid = pid_file.read_text().strip() if pid_file.exists() else ""
        if with_pid and pid_alive(int(with_pid)):
            os.kill(int(with_pid), signal.SIGKILL)
