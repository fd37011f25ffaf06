"""sacct's `JOBID.0`, `JOBID.1` rows for the `srun` steps a job ran, end to end: a real server
runs a script whose steps complete, fail and are cancelled with their job; sacct lists them
after `.batch` and `.extern` (Slurm's order), with Slurm's states and `code:signal` exit codes,
and the API gives them as the job's `steps`. On a root server a job run as its owner records
its steps the same way."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from gpuyard.adapters.identity import unix_identity
from gpuyard.services.launch.run_as import RunAsPolicy
from tests.e2e.executor_rig import Rig
from tests.e2e.server import ServerProcess, wait_ended, wait_for
from tests.e2e.test_srun import submit_script
from tests.e2e.unix_users import UnixUsers

STEPS = (
    "srun true\n"
    "srun -K0 -n 2 sh -c 'exit 3'\n"
    "srun sh -c 'echo step-2-running; exec sleep 60'\n"
)  # fmt: skip


def test_sacct_lists_the_srun_steps_of_a_job_after_its_batch_step(
    server: ServerProcess, tmp_path: Path
) -> None:
    job_id = submit_script(server, STEPS, tmp_path)
    log = server.state_dir / "jobs" / str(job_id) / "output.log"
    wait_for(lambda: log.exists() and "step-2-running" in log.read_text(), timeout_s=30)
    assert server.cli("scancel", str(job_id)).stdout == ""
    with server.client() as client:
        ended = wait_ended(client, job_id)
    assert ended["state"] == "CANCELLED"

    fields = "--format=JobID,JobName,State,ExitCode,NTasks"
    rows = server.cli("sacct", "-j", str(job_id), fields, "-P").stdout.splitlines()
    assert rows[0] == "JobID|JobName|State|ExitCode|NTasks"
    assert [row.split("|")[0] for row in rows[1:4]] == [
        str(job_id), f"{job_id}.batch", f"{job_id}.extern",
    ]  # fmt: skip
    assert rows[4:] == [
        f"{job_id}.0|true|COMPLETED|0:0|1",
        f"{job_id}.1|sh|FAILED|3:0|2",
        f"{job_id}.2|sh|CANCELLED|0:15|1",
    ]
    # -X: the allocations only, no steps of any kind.
    only = server.cli("sacct", "-j", str(job_id), fields, "-P", "-n", "-X").stdout
    assert [row.split("|")[0] for row in only.splitlines()] == [str(job_id)]
    # Each step's times: within the job's, and Elapsed from them.
    times = server.cli("sacct", "-j", f"{job_id}", "-P", "-n",
                       "--format=JobID,Start,End,Elapsed").stdout.splitlines()  # fmt: skip
    job_row = times[0].split("|")
    for row in (line.split("|") for line in times[3:]):
        assert job_row[1] <= row[1] <= row[2] <= job_row[2], times
        assert row[3].startswith("00:"), row

    with server.client() as client:
        steps = client.job(job_id)["steps"]
    assert [(s["number"], s["name"], s["ntasks"], s["exit_code"], s["signal"])
            for s in steps[:2]] == [(0, "true", 1, 0, None), (1, "sh", 2, 3, None)]  # fmt: skip
    assert all(s["started_at"] and s["ended_at"] for s in steps[:2])
    # The cancelled step: its end recorded by srun (SIGTERM), or none when the job's last
    # processes were ended before srun could write it; sacct shows CANCELLED 0:15 either way.
    last = steps[2]
    assert (last["number"], last["name"], last["ntasks"]) == (2, "sh", 1)
    assert (last["exit_code"], last["signal"]) in ((143, 15), (None, None))


def test_a_job_that_runs_no_srun_has_no_numbered_steps(
    server: ServerProcess, tmp_path: Path
) -> None:
    job_id = submit_script(server, "echo plain\n", tmp_path)
    with server.client() as client:
        assert wait_ended(client, job_id)["state"] == "COMPLETED"
        assert client.job(job_id)["steps"] == []
    rows = server.cli("sacct", "-j", str(job_id), "-P", "-n", "--format=JobID").stdout
    assert rows.split() == [str(job_id), f"{job_id}.batch", f"{job_id}.extern"]


def test_a_job_run_as_its_owner_records_its_steps(users: UnixUsers) -> None:
    """A root server: the steps folder is alice's own (the job's folder stays the server's),
    her srun writes its records there and the supervisor's end carries them."""
    state = Path(tempfile.mkdtemp(prefix="gpuyard-steps-", dir="/tmp"))
    state.chmod(0o711)
    rig = Rig(state)
    try:
        alice = RunAsPolicy(unix_identity, 0, "root").for_owner(users.alice)
        script = "srun -n 1 id -un\nsrun sh -c 'exit 4'\n"
        rig.start(1, script, run_as=alice, workdir=Path("/"), ntasks_per_node=2)
        end = rig.wait_end(1)
        assert end.exit_code == 4, rig.log(1)
        assert [(s.number, s.name, s.ntasks, s.exit_code) for s in end.steps] == [
            (0, "id", 1, 0), (1, "sh", 2, 4),
        ]  # fmt: skip
    finally:
        rig.executor.close()
        shutil.rmtree(state, ignore_errors=True)
