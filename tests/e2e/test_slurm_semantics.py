"""Slurm's semantics where a batch script or a tool can tell, against a real server: who
`--signal` reaches, `sbatch --wait`, `--test-only`, `--hold`, `squeue -j` of an ended job, and
`afterok` on a failed parent."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.e2e.server import ServerProcess, wait_ended, wait_for

# A Python that says whether USR1 reached it, then waits (up to the time limit) for it.
_PYTHON_WAITS_FOR_USR1 = (
    f"{sys.executable} -c '\n"
    "import signal, sys\n"
    'signal.signal(signal.SIGUSR1, lambda *_: (print("python got USR1", flush=True), '
    "sys.exit(0)))\n"
    'print("python ready", flush=True)\n'
    "while True: signal.pause()\n"
    "'"
)


@pytest.fixture
def server(tmp_path: Path):  # type: ignore[no-untyped-def]
    srv = ServerProcess(tmp_path / "state", "--gpus", "2", "--cpus", "8", "--kill-grace", "1")
    srv.start()
    yield srv
    srv.stop()
    srv.kill_jobs()


def _script(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_signal_without_b_reaches_the_scripts_programs_and_spares_the_batch_shell(
    server: ServerProcess, tmp_path: Path
) -> None:
    # As submitit's --signal=USR2@90 and Lightning's SIGUSR1@90 header: the program gets the
    # warning, the #!/bin/bash script around it carries on (Slurm never signals it).
    script = _script(tmp_path, "warn.sh", "#!/bin/bash\n#SBATCH --time=0:30\n"
                     "#SBATCH --signal=USR1@28\n" + _PYTHON_WAITS_FOR_USR1 + "\n"
                     "echo \"shell carried on\"\n")  # fmt: skip
    job_id = server.cli("sbatch", "--parsable", str(script), cwd=tmp_path).stdout.strip()
    job = wait_ended(server.client(), job_id)
    log = server.cli("logs", job_id).stdout
    assert "python got USR1" in log and "shell carried on" in log
    assert job["state"] == "COMPLETED"


def test_signal_with_b_reaches_the_batch_shell_alone(server: ServerProcess, tmp_path: Path) -> None:
    # B: is the batch shell's: its trap runs, the program it started does not get the signal.
    script = _script(tmp_path, "trap.sh", "#!/bin/bash\n#SBATCH --time=0:30\n"
                     "#SBATCH --signal=B:USR1@28\n"
                     "trap 'echo \"shell trapped\"; kill $child; exit 0' USR1\n"
                     + _PYTHON_WAITS_FOR_USR1 + " &\nchild=$!\nwait $child\n")  # fmt: skip
    job_id = server.cli("sbatch", "--parsable", str(script), cwd=tmp_path).stdout.strip()
    job = wait_ended(server.client(), job_id)
    log = server.cli("logs", job_id).stdout
    assert "shell trapped" in log and "python got USR1" not in log
    assert job["state"] == "COMPLETED"


def test_squeue_j_of_an_ended_job_prints_nothing_so_a_polling_loop_ends(
    server: ServerProcess, tmp_path: Path
) -> None:
    job_id = server.cli("sbatch", "--parsable", "--wrap", "true", cwd=tmp_path).stdout.strip()
    wait_ended(server.client(), job_id)
    # The classic wait, `while squeue -h -j $ID | grep -q .; do sleep 1; done`, ends.
    assert server.cli("squeue", "-h", "-j", job_id).stdout == ""
    # Its end is still there for whoever asks for ended states.
    assert server.cli("squeue", "-h", "-j", job_id, "-t", "all", "-o", "%i %T").stdout.split() == [
        job_id, "COMPLETED"]  # fmt: skip
    running = server.cli("sbatch", "--parsable", "--wrap", "sleep 30", cwd=tmp_path)
    wait_for(lambda: server.client().job(int(running.stdout))["state"] == "RUNNING")
    assert server.cli("squeue", "-h", "-j", running.stdout.strip(), "-o", "%i").stdout.split() == [
        running.stdout.strip()]  # fmt: skip
    server.cli("scancel", running.stdout.strip())


def test_sbatch_wait_blocks_until_the_job_ends_and_exits_with_its_code(
    server: ServerProcess, tmp_path: Path
) -> None:
    flag = tmp_path / "ran"
    failed = server.cli("sbatch", "--wait", "--wrap", f"touch {flag}; exit 3", cwd=tmp_path,
                        check=False)  # fmt: skip
    assert failed.returncode == 3 and flag.exists()  # it returned once the job had run
    assert failed.stdout.startswith("Submitted batch job ")
    job_id = failed.stdout.split()[-1]
    assert server.client().job(int(job_id))["state"] == "FAILED"
    ok = server.cli("sbatch", "-W", "--parsable", "--wrap", "true", cwd=tmp_path, check=False)
    assert ok.returncode == 0 and server.client().job(int(ok.stdout))["state"] == "COMPLETED"


def test_sbatch_test_only_says_when_the_job_would_start_and_queues_nothing(
    server: ServerProcess, tmp_path: Path
) -> None:
    before = server.client().jobs(all=True)
    result = server.cli("sbatch", "--test-only", "-c", "2", "--wrap", "true", cwd=tmp_path)
    line = result.stderr.strip().splitlines()[-1]
    assert re.fullmatch(
        r"sbatch: Job \d+ to start at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d using 2 "
        r"processors on nodes \S+ in partition gpuyard",
        line,
    ), line
    assert result.stdout == "" and server.client().jobs(all=True) == before


def test_sbatch_hold_submits_the_job_held_until_released(
    server: ServerProcess, tmp_path: Path
) -> None:
    flag = tmp_path / "ran"
    job_id = server.cli("sbatch", "--parsable", "--hold", "--wrap", f"touch {flag}",
                        cwd=tmp_path).stdout.strip()  # fmt: skip
    job = server.client().job(int(job_id))
    assert job["state"] == "PENDING" and job["held"] and job["reason"] == "JobHeldUser"
    # A later job runs past it: the held one does not start of itself.
    later = server.cli("sbatch", "--parsable", "--wrap", "true", cwd=tmp_path).stdout.strip()
    wait_ended(server.client(), later)
    assert server.client().job(int(job_id))["state"] == "PENDING" and not flag.exists()
    server.cli("release", job_id)
    assert wait_ended(server.client(), job_id)["state"] == "COMPLETED" and flag.exists()


def test_afterok_on_a_failed_parent_leaves_the_child_pending_never_satisfied(
    server: ServerProcess, tmp_path: Path
) -> None:
    # Slurm's default (no --kill-on-invalid-dep): the child is not cancelled; it waits, with
    # a reason saying why, for its owner to cancel it.
    parent = server.cli("sbatch", "--parsable", "--wrap", "exit 3", cwd=tmp_path).stdout.strip()
    child = server.cli("sbatch", "--parsable", "-d", f"afterok:{parent}", "--wrap", "true",
                       cwd=tmp_path).stdout.strip()  # fmt: skip
    assert wait_ended(server.client(), parent)["state"] == "FAILED"
    job = wait_for(
        lambda: (j := server.client().job(int(child)))["reason"] == "DependencyNeverSatisfied" and j
    )
    assert job["state"] == "PENDING"
    row = server.cli("squeue", "-h", "-j", child, "-o", "%i %t %r").stdout.split()
    assert row == [child, "PD", "DependencyNeverSatisfied"]
    server.cli("scancel", child)
    assert wait_ended(server.client(), child)["state"] == "CANCELLED"
