"""Slurm's command names on PATH (`gpuyard slurm-commands install DIR`): a real server, and a
user's shell that types `sbatch`, `squeue`, `scontrol`, `sinfo` and `srun` by their own names,
as tools (submitit, workflow managers) call them, reading what Slurm's would print."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.e2e.server import ServerProcess, wait_ended

SLURM = ("sbatch", "squeue", "sacct", "scancel", "scontrol", "sinfo", "srun", "salloc")


def shell(
    server: ServerProcess, bin_dir: Path, line: str, cwd: Path
) -> subprocess.CompletedProcess[str]:
    env = server.cli_env()
    env["PATH"] = f"{bin_dir}:{env.get('PATH', '')}"
    return subprocess.run(["/bin/sh", "-c", line], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=120)  # fmt: skip


def fields(text: str) -> dict[str, str]:
    """scontrol's record as a tool reads it: every Key=Value of it."""
    return dict(word.split("=", 1) for word in text.split() if "=" in word)


def installed(server: ServerProcess, tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    result = server.cli("slurm-commands", "install", str(bin_dir))
    assert result.stdout.strip() == f"wrote {' '.join(SLURM)} in {bin_dir}"
    return bin_dir


def test_sbatch_squeue_and_scontrol_by_their_names(server: ServerProcess, tmp_path: Path):
    bin_dir = installed(server, tmp_path)
    sub = shell(
        server, bin_dir, "sbatch --parsable -J train -G 1 -t 10 --wrap 'sleep 30'", tmp_path
    )
    assert sub.returncode == 0, sub.stderr
    job_id = sub.stdout.strip()
    queue = shell(server, bin_dir, f"squeue -h -j {job_id} -o '%i %j %T'", tmp_path)
    assert queue.stdout.split()[:2] == [job_id, "train"]
    with server.client() as client:
        wait_ended_or_running = client.job(int(job_id))
    assert wait_ended_or_running["state"] in ("PENDING", "RUNNING")
    shown = shell(server, bin_dir, f"scontrol show job {job_id}", tmp_path)
    record = fields(shown.stdout)
    assert shown.stdout.startswith(f"JobId={job_id} JobName=train\n")
    assert record["TimeLimit"] == "00:10:00" and record["NumNodes"] == "1"
    assert record["JobState"] in ("PENDING", "RUNNING") and "gres/gpu=1" in record["TRES"]
    assert record["StdOut"] == str(tmp_path / f"slurm-{job_id}.out")
    assert record["WorkDir"] == str(tmp_path) and record["ExitCode"] == "0:0"
    one_line = shell(server, bin_dir, f"scontrol show job -o {job_id}", tmp_path).stdout
    # The same record on one line; read later, so what time and a start change may differ.
    moving = {"RunTime", "JobState", "Reason", "StartTime", "EndTime", "NodeList", "BatchHost"}
    assert one_line.count("\n") == 1
    assert {k: v for k, v in fields(one_line).items() if k not in moving} == {
        k: v for k, v in record.items() if k not in moving
    }
    assert shell(server, bin_dir, f"scancel {job_id}", tmp_path).returncode == 0
    with server.client() as client:
        assert wait_ended(client, job_id)["state"] == "CANCELLED"
    ended = fields(shell(server, bin_dir, f"scontrol show job {job_id}", tmp_path).stdout)
    assert ended["JobState"] == "CANCELLED"


def test_scontrol_hold_update_release_and_hostnames(server: ServerProcess, tmp_path: Path):
    bin_dir = installed(server, tmp_path)
    with server.client() as client:
        blocker = client.submit(["sleep", "60"], gpus=4)  # the job below waits for GPUs
        job = client.submit(["true"], gpus=1)
    line = (f"scontrol hold {job['id']} && scontrol update JobId={job['id']} TimeLimit=90 && "
            f"scontrol show job {job['id']}")  # fmt: skip
    held = shell(server, bin_dir, line, tmp_path)
    assert held.returncode == 0, held.stderr
    record = fields(held.stdout)
    assert (record["JobState"], record["Reason"], record["TimeLimit"]) == (
        "PENDING", "JobHeldUser", "01:30:00",
    )  # fmt: skip
    renamed = shell(server, bin_dir, f"scontrol update JobId={job['id']} Name=x", tmp_path)
    assert renamed.returncode == 1 and len(renamed.stderr.splitlines()) == 1
    assert shell(server, bin_dir, f"scontrol release {job['id']}", tmp_path).returncode == 0
    with server.client() as client:
        assert client.job(job["id"])["held"] is False
        client.cancel(blocker["id"])
        assert wait_ended(client, job["id"])["state"] == "COMPLETED"
    hosts = shell(server, bin_dir, "scontrol show hostnames 'gpu[01-03,7],login'", tmp_path)
    assert hosts.stdout.split() == ["gpu01", "gpu02", "gpu03", "gpu7", "login"]


def test_sinfo_shows_the_machine_its_cpus_memory_and_gpus(server: ServerProcess, tmp_path: Path):
    bin_dir = installed(server, tmp_path)
    default = shell(server, bin_dir, "sinfo", tmp_path).stdout.splitlines()
    assert default[0].split() == ["PARTITION", "AVAIL", "TIMELIMIT", "NODES", "STATE", "NODELIST"]
    assert default[1].split()[:5] == ["gpuyard*", "up", "infinite", "1", "idle"]
    long = shell(server, bin_dir, "sinfo -N -l", tmp_path).stdout.splitlines()
    assert long[1].split()[:6] == ["NODELIST", "NODES", "PARTITION", "STATE", "CPUS", "S:C:T"]
    assert long[2].split()[1:5] == ["1", "gpuyard*", "idle", "32"]
    gres = shell(server, bin_dir, "sinfo -h -N -o '%G %c'", tmp_path).stdout.split()
    assert gres == ["gpu:4", "32"]


def test_srun_outside_a_job_runs_a_step_here_with_its_exit_code(
    server: ServerProcess, tmp_path: Path
):
    bin_dir = installed(server, tmp_path)
    ran = shell(server, bin_dir, "srun -G 1 sh -c 'echo on-the-gpu $CUDA_VISIBLE_DEVICES; exit 3'",
                tmp_path)  # fmt: skip
    assert ran.returncode == 3
    assert ran.stdout.startswith("on-the-gpu ")
    assert ran.stderr.strip().endswith("Exited with exit code 3")
    tasks = shell(server, bin_dir, "srun -n 2 -l sh -c 'echo rank $SLURM_PROCID'", tmp_path)
    assert (tasks.returncode, sorted(tasks.stdout.splitlines())) == (0, ["0: rank 0", "1: rank 1"])


def test_srun_inside_a_job_is_the_jobs_step_not_a_new_job(server: ServerProcess, tmp_path: Path):
    """A plain command job (no shim on its PATH) whose PATH has the installed `srun`: it runs the
    step inside the job, as Slurm's srun inside an allocation does, and queues nothing."""
    bin_dir = installed(server, tmp_path)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    if os.environ.get("PYTHONPATH"):  # the gpuyard under test, wherever the tests run it from
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    with server.client() as client:
        job = client.submit(["sh", "-c", "srun sh -c 'echo step $SLURM_PROCID of $SLURM_JOB_ID'"],
                            env=env)  # fmt: skip
        ended = wait_ended(client, job["id"])
        assert (ended["state"], len(client.jobs(all=True))) == ("COMPLETED", 1)
    log = (server.state_dir / "jobs" / str(job["id"]) / "output.log").read_text()
    assert log.splitlines()[-1] == f"step 0 of {job['id']}"


def test_install_leaves_a_real_slurms_commands_alone(server: ServerProcess, tmp_path: Path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text("#!/bin/sh\necho real\n")
    result = server.cli("slurm-commands", "install", str(bin_dir), check=False)
    assert result.returncode == 1 and "left alone sbatch" in result.stderr
    assert (bin_dir / "sbatch").read_text() == "#!/bin/sh\necho real\n"
    assert (bin_dir / "squeue").exists()
    again = server.cli("slurm-commands", "install", str(bin_dir), "--force")
    assert again.returncode == 0 and "written by `gpuyard" in (bin_dir / "sbatch").read_text()
