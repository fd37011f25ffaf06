"""`srun --gpu-bind` inside a job, against a real server on 4 GPUs: each value gives every task
of the step the GPUs Slurm would give it, numbered from 0 among the job's GPUs (what the tasks
print of CUDA_VISIBLE_DEVICES and GPU_DEVICE_ORDINAL), and a binding that names a GPU the job
does not hold is one error line, with nothing run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.server import ServerProcess, wait_ended
from tests.e2e.test_slurm_semantics import _script

SAYS = "sh -c 'echo \"$TAG $SLURM_PROCID $CUDA_VISIBLE_DEVICES $GPU_DEVICE_ORDINAL\"'"
# Each binding, and the GPUs (positions among the job's 4) its tasks 0..3 get.
BINDINGS = {
    "none": ["0,1,2,3"] * 4,
    "closest": ["0,1,2,3"] * 4,  # no NUMA knowledge: every GPU is as near as the others
    "single:2": ["0", "0", "1", "1"],
    "per_task:1": ["0", "1", "2", "3"],
    "map_gpu:3,0*2": ["3", "0", "0", "3"],
    "mask_gpu:0x3,0xc": ["0,1", "2,3", "0,1", "2,3"],
}  # fmt: skip


@pytest.fixture
def server(tmp_path: Path):  # type: ignore[no-untyped-def]
    srv = ServerProcess(tmp_path / "state", "--gpus", "4", "--cpus", "8", "--kill-grace", "1")
    srv.start()
    yield srv
    srv.stop()
    srv.kill_jobs()


def _run(server: ServerProcess, tmp_path: Path, body: str) -> tuple[dict[str, object], str]:
    script = _script(tmp_path, "bind.sh", "#!/bin/sh\n#SBATCH -n 4\n#SBATCH --gpus 4\n" + body)
    job_id = server.cli("sbatch", "--parsable", str(script), cwd=tmp_path).stdout.strip()
    job = wait_ended(server.client(), job_id)
    return job, server.cli("logs", job_id).stdout


def test_each_gpu_bind_value_gives_the_tasks_slurms_gpus(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Both spellings (`--gpu-bind X`, `--gpu-bind=X`) and srun's SLURM_GPU_BIND; `verbose,`
    adds a line a task on stderr naming its rank and GPUs."""
    lines = ['echo "batch $CUDA_VISIBLE_DEVICES"\n']
    for i, value in enumerate(BINDINGS):
        option = f"--gpu-bind={value}" if i % 2 else f"--gpu-bind {value}"
        lines.append(f"TAG={value} srun {option} {SAYS}\n")
    lines.append(f"TAG=verbose srun --gpu-bind=verbose,map_gpu:2 -n 2 {SAYS}\n")
    lines.append(f"TAG=env SLURM_GPU_BIND=map_gpu:1 srun -n 2 {SAYS}\n")  # srun's input variable
    job, log = _run(server, tmp_path, "".join(lines))
    assert job["state"] == "COMPLETED", log
    (batch,) = [ln for ln in log.splitlines() if ln.startswith("batch ")]
    gpus = batch.split()[1].split(",")
    assert len(gpus) == 4
    for value, wanted in BINDINGS.items():
        got = sorted(ln for ln in log.splitlines() if ln.startswith(f"{value} "))
        masks = [",".join(gpus[int(p)] for p in w.split(",")) for w in wanted]
        assert got == [f"{value} {rank} {m} {m}" for rank, m in enumerate(masks)], (value, log)
    third = gpus[2]
    assert sorted(ln for ln in log.splitlines() if ln.startswith("verbose ")) == [
        f"verbose 0 {third} {third}", f"verbose 1 {third} {third}"]  # fmt: skip
    told = sorted(ln for ln in log.splitlines() if "gpu-bind: task" in ln)
    assert len(told) == 2 and all(f"CUDA_VISIBLE_DEVICES={third}" in ln for ln in told), log
    assert "task 0 (local 0)" in told[0] and "task 1 (local 1)" in told[1]
    second = gpus[1]
    assert sorted(ln for ln in log.splitlines() if ln.startswith("env ")) == [
        f"env 0 {second} {second}", f"env 1 {second} {second}"]  # fmt: skip


@pytest.mark.parametrize(
    ("value", "says"),
    [("map_gpu:0,4", "GPU 4 is not the job's"),
     ("mask_gpu:0x10", "the mask '0x10' names GPU 4, not the job's"),
     ("closer", "not a binding this srun knows")],
)  # fmt: skip
def test_a_binding_to_a_gpu_the_job_does_not_hold_is_one_line_and_runs_nothing(
    server: ServerProcess, tmp_path: Path, value: str, says: str
) -> None:
    job, log = _run(server, tmp_path, f"srun --gpu-bind={value} echo ran\n")
    assert job["state"] == "FAILED"
    errors = [ln for ln in log.splitlines() if "srun (gpuyard)" in ln]
    assert len(errors) == 1 and f"--gpu-bind={value}: {says}" in errors[0], log
    assert "ran" not in log.split()


def test_gpuyard_srun_outside_a_job_binds_its_tasks_the_same_way(
    server: ServerProcess, tmp_path: Path
) -> None:
    """`gpuyard srun -n 2 --gpus 2 --gpu-bind=map_gpu:1 CMD`: both tasks on the job's second
    GPU (the option reaches the job's own srun, not a warning)."""
    says = 'echo "task $SLURM_PROCID sees $CUDA_VISIBLE_DEVICES"'
    out = server.cli("srun", "-n", "2", "--gpus", "2", "--gpu-bind", "map_gpu:1", "sh", "-c",
                     says, cwd=tmp_path)  # fmt: skip
    seen = [line.split()[-1] for line in out.stdout.splitlines() if " sees " in line]
    assert len(seen) == 2 and len(set(seen)) == 1 and "," not in seen[0], out.stdout
    assert "gpu-bind" not in out.stderr, out.stderr


def test_sbatch_gpu_bind_binds_every_srun_step_of_the_job(
    server: ServerProcess, tmp_path: Path
) -> None:
    """`#SBATCH --gpu-bind=map_gpu:2` (as Slurm's): the batch step keeps all the job's GPUs and
    sees SLURM_GPU_BIND; each srun step binds its tasks to the job's third GPU; an srun's own
    `--gpu-bind` wins over it."""
    body = ('#SBATCH --gpu-bind=map_gpu:2\n'
            'echo "batch $CUDA_VISIBLE_DEVICES $SLURM_GPU_BIND"\n'
            f"TAG=step srun {SAYS}\n"
            f"TAG=own srun --gpu-bind=single:4 {SAYS}\n")  # fmt: skip
    job, log = _run(server, tmp_path, body)
    assert job["state"] == "COMPLETED", log
    (batch,) = [ln for ln in log.splitlines() if ln.startswith("batch ")]
    _, mask, bind = batch.split()
    gpus = mask.split(",")
    assert len(gpus) == 4 and bind == "map_gpu:2", log
    third, first = gpus[2], gpus[0]
    step = sorted(ln for ln in log.splitlines() if ln.startswith("step "))
    assert step == [f"step {rank} {third} {third}" for rank in range(4)], log
    own = sorted(ln for ln in log.splitlines() if ln.startswith("own "))
    assert own == [f"own {rank} {first} {first}" for rank in range(4)], log


def test_a_gpu_bind_directive_that_cannot_mean_anything_is_refused_at_submit(
    server: ServerProcess, tmp_path: Path
) -> None:
    script = _script(tmp_path, "bad.sh", "#!/bin/sh\n#SBATCH --gpus 1\n"
                     "#SBATCH --gpu-bind=map_gpu:a\necho ran\n")  # fmt: skip
    out = server.cli("sbatch", str(script), check=False, cwd=tmp_path)
    assert out.returncode != 0
    (line,) = out.stderr.strip().splitlines()
    assert "bad.sh:3: --gpu-bind=map_gpu:a" in line and "map_gpu:LIST" in line, out.stderr
    assert server.client().jobs(all=True) == [], "nothing is queued"
