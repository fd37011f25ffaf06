"""What a job sees of Slurm: the SLURM_* variables, true for the job, and what frameworks that
detect Slurm from them make of it (PyTorch Lightning, run for real: its choice of cluster
environment and the ranks it reads, under gpuyard's `srun` and under torchrun)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuyard.adapters.executor.srun_shim import SHIM_SOURCE
from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.states import JobState
from gpuyard.jobhooks import HOOK_DIR
from gpuyard.services.launch.env import (
    ONE_TASK_VARIABLES,
    TASK_VARIABLES,
    array_shape,
    build_job_env,
)
from gpuyard.services.launch.plan import launch_plan, needs_port
from gpuyard.services.ports import RunAs

BASE = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def job(**fields: object) -> Job:
    gpus = fields.pop("gpu_ids", ())
    node = fields.pop("node", "box")
    array = fields.pop("array", None)  # (array id, index); its --array text: array_text
    fields["array"] = fields.pop("array_text", "")
    spec = JobSpec(**{"argv": ("python", "train.py"), "name": "train", "workdir": "/w", **fields})  # type: ignore[arg-type]
    array_job_id, array_task_id = array if array else (None, None)
    return Job(
        42, spec, "ada", JobState.RUNNING, 1.0, gpus=tuple(gpus), node=str(node),  # type: ignore[arg-type]
        array_job_id=array_job_id, array_task_id=array_task_id,
    )  # fmt: skip


def test_every_job_gets_the_slurm_variables_true_for_it() -> None:
    who = RunAs(user="ada", uid=1000, gid=1000, groups=(1000,), home="/home/ada")
    env = build_job_env(
        job(gpus=2, cpus=8, mem_mib=16384, gpu_ids=(1, 3)), BASE, None, who
    )  # fmt: skip
    assert env["SLURM_JOB_ID"] == env["SLURM_JOBID"] == "42"
    assert env["SLURM_JOB_NAME"] == "train" and env["SLURM_JOB_USER"] == "ada"
    assert env["SLURM_JOB_NUM_NODES"] == env["SLURM_NNODES"] == "1"
    assert env["SLURM_NODELIST"] == env["SLURM_JOB_NODELIST"] == "box"
    assert env["SLURM_NODEID"] == "0"
    assert env["SLURM_SUBMIT_DIR"] == "/w"  # no sbatch cwd sent: the job's workdir
    assert env["SLURM_SUBMIT_HOST"]
    assert (env["SLURM_CPUS_PER_TASK"], env["SLURM_CPUS_ON_NODE"]) == ("8", "8")
    assert env["SLURM_MEM_PER_NODE"] == "16384"
    assert (env["SLURM_GPUS_ON_NODE"], env["SLURM_JOB_GPUS"]) == ("2", "1,3")
    assert env["SLURM_CLUSTER_NAME"] == "gpuyard"
    assert env["CUDA_VISIBLE_DEVICES"] == "1,3"
    assert "SLURM_ARRAY_TASK_ID" not in env


def test_the_directory_sbatch_ran_in_is_the_submit_dir() -> None:
    sent = (("SLURM_SUBMIT_DIR", "/home/ada/project"),)
    env = build_job_env(job(env=sent), BASE)
    assert env["SLURM_SUBMIT_DIR"] == "/home/ada/project"


SHAPE = [f"SLURM_ARRAY_TASK_{n}" for n in ("COUNT", "MIN", "MAX", "STEP")]


def test_an_array_task_knows_its_array_and_its_index() -> None:
    env = build_job_env(job(array=(40, 7)), BASE)
    assert (env["SLURM_ARRAY_JOB_ID"], env["SLURM_ARRAY_TASK_ID"]) == ("40", "7")
    assert not set(SHAPE) & env.keys()  # a sweep's trial: no --array text to tell its shape
    env = build_job_env(job(array=(40, 7), array_text="0-9%2"), BASE)
    assert [env[k] for k in SHAPE] == ["10", "0", "9", "1"]


# Slurm 22.05's own values (sbatch --array=TEXT, run side by side): the step is the gap of
# evenly spaced indices, else 1.
@pytest.mark.parametrize(
    ("text", "shape"),
    [("1,3,7", (3, 1, 7, 1)), ("0-12:4", (4, 0, 12, 4)), ("2,4,6,10", (4, 2, 10, 1)),
     ("0-31%4", (32, 0, 31, 1)), ("5", (1, 5, 5, 1)), ("1-7:2,9", (5, 1, 9, 2))],
)  # fmt: skip
def test_an_arrays_count_min_max_and_step_are_slurms(
    text: str, shape: tuple[int, int, int, int]
) -> None:
    assert array_shape(text) == shape
    env = build_job_env(job(array=(40, shape[1]), array_text=text), BASE)
    assert [env[k] for k in SHAPE] == [str(v) for v in shape]


def test_a_one_task_job_is_task_0_without_a_task_count() -> None:
    """As Slurm's batch step: SLURM_PROCID and SLURM_LOCALID 0, no SLURM_NTASKS (Lightning
    would take it for one task of a step); `--ntasks-per-node=1` given: SLURM_NTASKS 1."""
    plain = build_job_env(job(gpus=4, gpu_ids=(0, 1, 2, 3)), BASE)
    assert (plain["SLURM_PROCID"], plain["SLURM_LOCALID"]) == ("0", "0")
    assert "SLURM_NTASKS" not in plain
    one = build_job_env(job(ntasks_given=True), BASE)
    assert (one["SLURM_NTASKS"], one["SLURM_NTASKS_PER_NODE"], one["SLURM_PROCID"]) == (
        "1", "1", "0")  # fmt: skip


def test_gpus_per_node_or_per_task_partition_account_and_dependency() -> None:
    per_node = build_job_env(job(gpus=4, nodes=2, gpu_ids=(0, 1, 2, 3), node="a,b"), BASE)
    assert per_node["SLURM_GPUS_PER_NODE"] == "2" and "SLURM_GPUS_PER_TASK" not in per_node
    per_task = build_job_env(
        job(gpus=4, ntasks_per_node=2, gpus_per_task=2, gpu_ids=(0, 1, 2, 3)), BASE
    )
    assert per_task["SLURM_GPUS_PER_TASK"] == "2" and "SLURM_GPUS_PER_NODE" not in per_task
    assert per_task["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"  # the batch step: all (srun binds)
    cpu = build_job_env(job(dependency="afterok:12:13,singleton"), BASE)
    assert not {"SLURM_GPUS_PER_NODE", "SLURM_GPUS_PER_TASK"} & cpu.keys()
    assert (cpu["SLURM_JOB_PARTITION"], cpu["SLURM_JOB_ACCOUNT"]) == ("gpuyard", "ada")
    assert cpu["SLURM_JOB_DEPENDENCY"] == "afterok:12:13,singleton"
    assert "SLURM_JOB_DEPENDENCY" not in per_node


def test_gpu_counts_carry_the_type_the_user_named_as_slurms_do() -> None:
    """`--gpus-per-task=a100:2` gives SLURM_GPUS_PER_TASK=a100:2, `--gres=gpu:a100:4`
    SLURM_GPUS_PER_NODE=a100:4 (tools parse the `TYPE:`); no type named: the bare number."""
    typed = build_job_env(job(gpus=4, gpu_type="a100", gpu_ids=(0, 1, 2, 3)), BASE)
    assert typed["SLURM_GPUS_PER_NODE"] == "a100:4"
    per_task = build_job_env(job(gpus=4, ntasks_per_node=2, gpus_per_task=2, gpu_type="a100",
                                 gpu_ids=(0, 1, 2, 3)), BASE)  # fmt: skip
    assert per_task["SLURM_GPUS_PER_TASK"] == "a100:2"
    assert per_task["SLURM_GPUS_ON_NODE"] == "4"  # a count, never typed (as Slurm's)
    plain = build_job_env(job(gpus=2, gpu_ids=(0, 1)), BASE)
    assert plain["SLURM_GPUS_PER_NODE"] == "2"


def test_gpu_device_ordinal_names_the_same_gpus_as_cuda_visible_devices() -> None:
    """Slurm's gres/gpu sets GPU_DEVICE_ORDINAL beside CUDA_VISIBLE_DEVICES; a job on no GPUs
    gets none, whatever the submitter had."""
    env = build_job_env(job(gpus=2, gpu_ids=(1, 3)), BASE)
    assert env["GPU_DEVICE_ORDINAL"] == env["CUDA_VISIBLE_DEVICES"] == "1,3"
    cpu = build_job_env(job(), {**BASE, "GPU_DEVICE_ORDINAL": "7"})
    assert "GPU_DEVICE_ORDINAL" not in cpu


def test_python_output_is_line_buffered_not_unbuffered() -> None:
    """Every job's Python writes a line at a time (the startup hook first on PYTHONPATH), not
    in PYTHONUNBUFFERED's pieces; a job's own PYTHONUNBUFFERED is kept; a container's Python
    and one whose user cannot read the hook get PYTHONUNBUFFERED=1."""
    env = build_job_env(job(env=(("PYTHONPATH", "/mine"),)), BASE)
    assert "PYTHONUNBUFFERED" not in env and env["GPUYARD_LINE_BUFFERED"] == "1"
    assert env["PYTHONPATH"] == f"{HOOK_DIR}:/mine"
    shared = build_job_env(job(gpu_mem_mib=4096, gpus=1, gpu_ids=(0,)), BASE)
    assert shared["PYTHONPATH"] == HOOK_DIR  # once, for both hooks
    theirs = build_job_env(job(env=(("PYTHONUNBUFFERED", "1"),)), BASE)
    assert theirs["PYTHONUNBUFFERED"] == "1" and "GPUYARD_LINE_BUFFERED" not in theirs
    boxed = build_job_env(job(container="docker://python:3.12"), BASE)
    assert boxed["PYTHONUNBUFFERED"] == "1" and "GPUYARD_LINE_BUFFERED" not in boxed
    unreadable = build_job_env(job(), BASE, python_hook=False)
    assert unreadable["PYTHONUNBUFFERED"] == "1" and "PYTHONPATH" not in unreadable


def test_task_variables_only_where_the_job_asked_for_tasks() -> None:
    """A plain job on 4 GPUs is not one task of a Slurm step (Lightning would then refuse
    devices=4 or wait for 3 more ranks); a job of 3 tasks per node is, in its batch step
    task 0, as Slurm's; torchrun gives its ranks itself."""
    plain = build_job_env(job(gpus=4, gpu_ids=(0, 1, 2, 3)), BASE)
    assert set(TASK_VARIABLES) & plain.keys() == set(ONE_TASK_VARIABLES)
    tasks = build_job_env(job(ntasks_per_node=3, cpus=6), BASE)
    assert tasks["SLURM_NTASKS"] == tasks["SLURM_NTASKS_PER_NODE"] == "3"
    assert (tasks["SLURM_PROCID"], tasks["SLURM_LOCALID"]) == ("0", "0")
    assert tasks["SLURM_CPUS_PER_TASK"] == "2"
    two_nodes = build_job_env(job(ntasks_per_node=2, nodes=2, node="a,b"), BASE)
    assert (two_nodes["SLURM_NTASKS"], two_nodes["SLURM_TASKS_PER_NODE"]) == ("4", "2(x2)")
    torchrun = build_job_env(job(ntasks_per_node=2, distributed="torchrun"), BASE)
    assert set(TASK_VARIABLES) & torchrun.keys() == set(ONE_TASK_VARIABLES)
    assert torchrun["SLURM_JOB_ID"] == "42"


def test_a_submitters_own_slurm_variables_never_describe_the_job() -> None:
    """A submit from inside a Slurm job (sbatch --export=ALL) sends that job's variables."""
    theirs = (("SLURM_PROCID", "5"), ("SLURM_NTASKS", "8"), ("SLURM_JOB_ID", "999"))
    env = build_job_env(job(env=theirs), BASE)
    assert env["SLURM_JOB_ID"] == "42"
    assert env["SLURM_PROCID"] == "0" and "SLURM_NTASKS" not in env


def test_a_job_may_ask_for_no_slurm_variables() -> None:
    env = build_job_env(job(env=(("GPUYARD_SLURM_ENV", "0"), ("SLURM_MINE", "x"))), BASE)
    assert {k for k in env if k.startswith("SLURM_")} == {"SLURM_MINE"}
    plan = launch_plan(
        job(env=(("GPUYARD_SLURM_ENV", "0"),), script="x"), BASE, None, None, "/j/1/output.log"
    )
    assert not plan.srun_shim


def test_who_gets_srun_on_their_path() -> None:
    log = "/j/1/output.log"
    assert not launch_plan(job(), BASE, None, None, log).srun_shim
    assert launch_plan(job(script="#!/bin/sh\nsrun x\n"), BASE, None, None, log).srun_shim
    assert launch_plan(job(argv=("srun", "python", "t.py")), BASE, None, None, log).srun_shim
    assert launch_plan(job(ntasks_per_node=2), BASE, None, 5000, log).srun_shim
    assert needs_port(job(ntasks_per_node=2).spec) and not needs_port(job().spec)


# -- PyTorch Lightning, for real (CPU): which cluster environment it picks, which ranks -------
PROBE = """
import os, sys, warnings
warnings.simplefilter("ignore")
import pytorch_lightning as pl
trainer = pl.Trainer(accelerator="cpu", devices=int(sys.argv[1]), logger=False,
                     enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False)
env = trainer.strategy.cluster_environment
print("PROBE", type(env).__name__, trainer.global_rank, trainer.local_rank, trainer.world_size,
      env.main_address, env.main_port, flush=True)
"""


def _probes(output: str) -> list[list[str]]:
    return sorted(line.split()[1:] for line in output.splitlines() if line.startswith("PROBE"))


@pytest.fixture()
def probe(tmp_path: Path) -> Path:
    pytest.importorskip("pytorch_lightning")  # the `test` extra installs it
    path = tmp_path / "probe.py"
    path.write_text(PROBE)
    return path


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run(
        argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=240, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_lightning_takes_its_ranks_from_srun_in_a_job_of_several_tasks(
    probe: Path, tmp_path: Path
) -> None:
    """`#SBATCH --ntasks-per-node=2` then `srun python train.py`: two processes, each a
    SLURMEnvironment rank with the job's rendezvous port on this machine."""
    plan = launch_plan(job(ntasks_per_node=2), BASE, None, 23456, str(tmp_path / "output.log"))
    assert plan.srun_shim
    argv = ["sh", str(SHIM_SOURCE), sys.executable, str(probe), "2"]
    ranks = _probes(_run(argv, dict(plan.env), tmp_path))
    assert ranks == [
        ["SLURMEnvironment", "0", "0", "2", "127.0.0.1", "23456"],
        ["SLURMEnvironment", "1", "1", "2", "127.0.0.1", "23456"],
    ]


def test_lightning_starts_its_own_processes_in_a_plain_job(probe: Path, tmp_path: Path) -> None:
    """`gpuyard submit --gpus 2 -- python train.py` (or a script that runs python without
    srun): not taken for a Slurm task; Lightning launches its 2 ranks itself."""
    plan = launch_plan(job(gpus=2, gpu_ids=(0, 1)), BASE, None, None, str(tmp_path / "o.log"))
    kinds = _probes(_run([sys.executable, str(probe), "2"], dict(plan.env), tmp_path))
    assert [k[:4] for k in kinds] == [["LightningEnvironment", "0", "0", "2"]]


def test_lightning_under_torchrun_takes_torchruns_ranks(probe: Path, tmp_path: Path) -> None:
    """`--distributed torchrun`: every worker is the rank torchrun gave it, not SLURM's."""
    spec_job = job(argv=("python", str(probe), "2"), gpus=2, gpu_ids=(0, 1),
                   distributed="torchrun", ntasks_per_node=2)  # fmt: skip
    port = _free_port()
    plan = launch_plan(spec_job, BASE, None, port, str(tmp_path / "output.log"))
    argv = [sys.executable if a == "python" else a for a in plan.argv]
    workers = _probes(_run(argv, dict(plan.env), tmp_path))
    assert [w[:4] for w in workers] == [
        ["TorchElasticEnvironment", "0", "0", "2"],
        ["TorchElasticEnvironment", "1", "1", "2"],
    ]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
