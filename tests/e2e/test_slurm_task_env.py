"""What a batch script's tasks see, against a real server on 4 GPUs: `--gpus-per-task` binds
each srun task to its own GPUs (as Slurm 22.05 does, side by side: task i gets the GPUs i*G ..
i*G+G-1 of the job's), the SLURM_* variables sbatch sets that scripts read, and the lines of
Python processes that share one stdout kept whole while they still reach the log at once."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.e2e.server import ServerProcess, wait_ended, wait_for
from tests.e2e.test_slurm_semantics import _script

TASKS = ("srun sh -c 'echo \"task $SLURM_PROCID cvd=$CUDA_VISIBLE_DEVICES step=$SLURM_STEP_GPUS"
         " ord=$GPU_DEVICE_ORDINAL\"'\n")
ENV_NAMES = (
    "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_MAX",
    "SLURM_ARRAY_TASK_STEP", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS",
    "SLURM_GPUS_PER_NODE", "SLURM_GPUS_PER_TASK", "SLURM_JOB_PARTITION", "SLURM_JOB_ACCOUNT",
    "SLURM_JOB_DEPENDENCY",
)  # fmt: skip


@pytest.fixture
def server(tmp_path: Path):  # type: ignore[no-untyped-def]
    srv = ServerProcess(tmp_path / "state", "--gpus", "4", "--cpus", "8", "--kill-grace", "1")
    srv.start()
    yield srv
    srv.stop()
    srv.kill_jobs()


def _lines(server: ServerProcess, job_id: str, prefix: str) -> list[str]:
    log = server.cli("logs", job_id).stdout
    return sorted(line for line in log.splitlines() if line.startswith(prefix))


def test_gpus_per_task_gives_each_srun_task_its_own_gpus(
    server: ServerProcess, tmp_path: Path
) -> None:
    """`-n 2 --gpus-per-task 2`: the batch step sees the job's 4 GPUs, each task of a step only
    its 2 (per-task `cuda:0` code no longer stacks both tasks on one GPU); a step of one task
    gets the first task's; `gpuyard srun` outside a job binds its tasks the same way."""
    one_task = "srun -n 1 sh -c 'echo \"one cvd=$CUDA_VISIBLE_DEVICES\"'\n"
    script = _script(tmp_path, "bind.sh", "#!/bin/sh\n"
                     'echo "batch cvd=$CUDA_VISIBLE_DEVICES per_task=$SLURM_GPUS_PER_TASK"\n'
                     'echo "ordinal=$GPU_DEVICE_ORDINAL"\n'
                     + TASKS + one_task)  # fmt: skip
    job_id = server.cli("sbatch", "--parsable", "-n", "2", "--gpus-per-task", "2", str(script),
                        cwd=tmp_path).stdout.strip()  # fmt: skip
    job = wait_ended(server.client(), job_id)
    assert (job["state"], job["gpus_per_task"], len(job["gpus"])) == ("COMPLETED", 2, 4)
    (batch,) = _lines(server, job_id, "batch ")
    gpus = batch.split()[1].removeprefix("cvd=").split(",")
    assert len(gpus) == 4 and batch.endswith("per_task=2")
    mine = [",".join(gpus[:2]), ",".join(gpus[2:])]
    # GPU_DEVICE_ORDINAL beside CUDA_VISIBLE_DEVICES, the same list, as Slurm's gres/gpu sets it.
    assert _lines(server, job_id, "ordinal=") == [f"ordinal={','.join(gpus)}"]
    assert _lines(server, job_id, "task ") == [
        f"task 0 cvd={mine[0]} step={mine[0]} ord={mine[0]}",
        f"task 1 cvd={mine[1]} step={mine[1]} ord={mine[1]}"]  # fmt: skip
    assert _lines(server, job_id, "one ") == [f"one cvd={mine[0]}"]

    says = 'echo "task $SLURM_PROCID sees $CUDA_VISIBLE_DEVICES"'
    out = server.cli("srun", "-n", "2", "--gpus-per-task", "1", "sh", "-c", says, cwd=tmp_path)
    seen = sorted(line.split()[-1] for line in out.stdout.splitlines() if " sees " in line)
    assert len(seen) == 2 and len(set(seen)) == 2 and all("," not in s for s in seen), out.stdout


def test_a_step_that_needs_more_gpus_than_the_job_has_is_refused_in_one_line(
    server: ServerProcess, tmp_path: Path
) -> None:
    script = _script(tmp_path, "more.sh", "#!/bin/sh\nsrun -n 3 --gpus-per-task 1 true\n")
    job_id = server.cli("sbatch", "--parsable", "-n", "2", "--gpus-per-task", "1", str(script),
                        cwd=tmp_path).stdout.strip()  # fmt: skip
    job = wait_ended(server.client(), job_id)
    assert job["state"] == "FAILED"
    log = server.cli("logs", job_id).stdout
    assert "3 tasks x 1 GPUs per task need 3 GPUs; this node has 2 of the job's" in log


def test_an_sbatch_scripts_gpu_type_is_kept_in_the_gpu_variables(
    server: ServerProcess, tmp_path: Path
) -> None:
    """`#SBATCH --gpus-per-task=a100:2` gives SLURM_GPUS_PER_TASK=a100:2 (srun still binds 2
    GPUs a task), `--gres=gpu:a100:2` SLURM_GPUS_PER_NODE=a100:2, as Slurm keeps the type."""
    says = 'echo "vars task=$SLURM_GPUS_PER_TASK node=$SLURM_GPUS_PER_NODE"\n'
    per_task = _script(tmp_path, "typed.sh", "#!/bin/sh\n#SBATCH -n 2\n"
                       "#SBATCH --gpus-per-task=a100:2\n" + says + TASKS)  # fmt: skip
    job_id = server.cli("sbatch", "--parsable", str(per_task), cwd=tmp_path).stdout.strip()
    assert wait_ended(server.client(), job_id)["state"] == "COMPLETED"
    assert _lines(server, job_id, "vars ") == ["vars task=a100:2 node="]
    tasks = _lines(server, job_id, "task ")
    assert len(tasks) == 2 and all(len(t.split()[2].split(",")) == 2 for t in tasks), tasks
    gres = _script(tmp_path, "gres.sh", "#!/bin/sh\n#SBATCH --gres=gpu:a100:2\n" + says)
    job_id = server.cli("sbatch", "--parsable", str(gres), cwd=tmp_path).stdout.strip()
    assert wait_ended(server.client(), job_id)["state"] == "COMPLETED"
    assert _lines(server, job_id, "vars ") == ["vars task= node=a100:2"]


def _env_script(tmp_path: Path) -> Path:
    prints = "".join(f'echo "{n}=${{{n}-unset}}"\n' for n in ENV_NAMES)
    return _script(tmp_path, "env.sh", "#!/bin/sh\n" + prints)


def _env_of(server: ServerProcess, job_id: str) -> dict[str, str]:
    lines = _lines(server, job_id, "SLURM_")
    return dict(line.split("=", 1) for line in lines)


def test_the_slurm_variables_a_script_reads_are_sbatchs(
    server: ServerProcess, tmp_path: Path
) -> None:
    """The values Slurm 22.05 gave the same submissions, side by side (but the account: the
    job's owner here, and the partition: the server's one queue)."""
    script = _env_script(tmp_path)
    array = server.cli("sbatch", "--parsable", "--array=0-12:4", str(script), cwd=tmp_path)
    first = array.stdout.strip()
    client = server.client()
    tasks = wait_for(lambda: [j for j in client.jobs(all=True) if j.get("array_job_id")
                              == int(first)] or None)  # fmt: skip
    task_4 = next(j for j in tasks if j["array_task_id"] == 4)
    assert wait_ended(client, task_4["id"])["state"] == "COMPLETED"
    env = _env_of(server, str(task_4["id"]))
    owner = task_4["owner"]
    assert env == {
        "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_MAX": "12",
        "SLURM_ARRAY_TASK_STEP": "4", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
        "SLURM_NTASKS": "unset", "SLURM_GPUS_PER_NODE": "unset", "SLURM_GPUS_PER_TASK": "unset",
        "SLURM_JOB_PARTITION": "gpuyard", "SLURM_JOB_ACCOUNT": owner,
        "SLURM_JOB_DEPENDENCY": "unset",
    }  # fmt: skip

    after = f"--dependency=afterany:{task_4['id']}"
    one = server.cli("sbatch", "--parsable", "--ntasks-per-node=1", "--gpus-per-node=2", after,
                     str(script), cwd=tmp_path)  # fmt: skip
    job_id = one.stdout.strip()
    assert wait_ended(client, job_id)["state"] == "COMPLETED"
    env = _env_of(server, job_id)
    assert (env["SLURM_NTASKS"], env["SLURM_PROCID"], env["SLURM_LOCALID"]) == ("1", "0", "0")
    assert (env["SLURM_GPUS_PER_NODE"], env["SLURM_GPUS_PER_TASK"]) == ("2", "unset")
    assert env["SLURM_JOB_DEPENDENCY"] == f"afterany:{task_4['id']}"
    assert env["SLURM_ARRAY_TASK_COUNT"] == "unset"


# Each of two processes prints `first TAG`, waits for the test's go, then 2,000 lines of 22
# words each (a print is 44 writes unbuffered).
_PRINTER = (
    "import os, sys, time\n"
    "tag, go = sys.argv[1], sys.argv[2]\n"
    "print('first', tag)\n"
    "while not os.path.exists(go):\n"
    "    time.sleep(0.02)\n"
    "for i in range(2000):\n"
    "    print(tag, *[tag * 3] * 20, i)\n"
)


def test_lines_of_python_processes_sharing_stdout_stay_whole_and_reach_the_log_at_once(
    server: ServerProcess, tmp_path: Path
) -> None:
    """As torchrun's workers under one task: two Pythons writing to the job's one stdout. Each
    line comes whole (forced PYTHONUNBUFFERED wrote each print in pieces the other process's
    broke into), and a line is in the log as soon as it is printed (not held in a buffer)."""
    printer = _script(tmp_path, "printer.py", _PRINTER)
    go = tmp_path / "go"
    script = _script(tmp_path, "two.sh", f"#!/bin/sh\n{sys.executable} {printer} a {go} &\n"
                     f"{sys.executable} {printer} b {go} &\nwait\n")  # fmt: skip
    client = server.client()
    job = client.submit([str(script)], script=script.read_text(), workdir=str(tmp_path))
    log = server.state_dir / "jobs" / str(job["id"]) / "output.log"

    def both_first_lines() -> bool:
        text = log.read_text() if log.exists() else ""
        return "first a\n" in text and "first b\n" in text

    wait_for(both_first_lines)  # the job is still waiting for `go`: its lines were not held
    assert client.job(int(job["id"]))["state"] == "RUNNING"
    go.touch()
    assert wait_ended(client, job["id"])["state"] == "COMPLETED"
    lines = [line for line in log.read_text().splitlines() if not line.startswith("first ")]
    whole = re.compile(r"([ab])( \1\1\1){20} \d+")
    broken = [line for line in lines if not whole.fullmatch(line)]
    assert len(lines) == 4000 and broken == [], broken[:5]
