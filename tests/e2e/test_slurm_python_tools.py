"""Python tools that call Slurm's commands by name, unchanged, against a real server through
`gpuyard slurm-commands install`'s commands on PATH, as on a Slurm cluster:
- submitit writes its own sbatch script (`--signal=USR2@...`, `-o logs/%j/...`, `srun` inside),
  submits it with `sbatch`, polls `sacct -o JobID,State,NodeList --parsable2`, cancels with
  `scancel` and requeues with `scontrol requeue` from inside the job;
- Lightning's documented auto-requeue header (`#SBATCH --signal=SIGUSR1@90`): its handler
  saves an hpc checkpoint and runs `scontrol requeue`, and the next run resumes from it.

The user is logged in (`gpuyard login`: their ~/.config/gpuyard), as a researcher on a shared
server is: the jobs' own `scontrol requeue` reaches the server the way their shell does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.server import GPUYARD, ServerProcess, wait_for

submitit = pytest.importorskip("submitit")
# The functions below travel by value: the job's interpreter need not import this module.
submitit.core.utils.cloudpickle.register_pickle_by_value(sys.modules[__name__])


class _Counts(submitit.helpers.Checkpointable):  # type: ignore[misc,name-defined]
    """Counts to `target`, one number a second, keeping where it got to in `self.reached`:
    submitit's checkpoint pickles this object, so a requeued run resumes from it."""

    def __init__(self, runs_file: str) -> None:
        self.runs_file = runs_file
        self.reached = 0

    def __call__(self, target: int) -> str:
        import time

        with open(self.runs_file, "a") as runs:
            runs.write(f"run {os.environ['SLURM_RESTART_COUNT']} from {self.reached}\n")
        while self.reached < target:
            time.sleep(1)
            self.reached += 1
        return f"counted to {self.reached}"


def _fails(x: int) -> int:
    raise ValueError(f"cannot take {x}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A server, Slurm's commands first on PATH, a user logged in to it; the folder for the
    executors' logs."""
    tmp = tmp_path_factory.mktemp("submitit")
    srv = ServerProcess(tmp / "state", "--gpus", "2", "--cpus", "8", "--kill-grace", "1")
    srv.start()
    try:
        bin_dir = tmp / "bin"
        srv.cli("slurm-commands", "install", str(bin_dir))
        with pytest.MonkeyPatch.context() as env:
            for key, value in srv.cli_env().items():
                env.setenv(key, value)
            for key in ("GPUYARD_URL", "GPUYARD_STATE_DIR", "GPUYARD_TOKEN", "XDG_CONFIG_HOME"):
                env.delenv(key, raising=False)
            env.setenv("HOME", str(tmp / "home"))
            env.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
            token = str(tmp / "state" / "token")
            subprocess.run([GPUYARD, "login", srv.url, "--token-file", token],
                           check=True, capture_output=True)  # fmt: skip
            yield tmp
    finally:
        srv.stop()
        srv.kill_jobs()


def _executor(cluster: Path, **parameters: Any) -> Any:
    executor = submitit.AutoExecutor(folder=str(cluster / "logs" / "%j"))
    assert executor.cluster == "slurm"  # found sbatch and srun on PATH
    executor.update_parameters(timeout_min=1, slurm_signal_delay_s=50, **parameters)
    return executor


# -- submitit ---------------------------------------------------------------------------------
def test_a_function_and_a_map_array_give_their_results_in_per_job_folders(cluster: Path) -> None:
    executor = _executor(cluster)
    job = executor.submit(pow, 2, 10)
    assert job.result() == 1024
    assert (cluster / "logs" / job.job_id / f"{job.job_id}_0_result.pkl").exists()
    tasks = executor.map_array(pow, [2, 3, 4], [2, 2, 2])
    assert [t.job_id.split("_")[1] for t in tasks] == ["0", "1", "2"]
    assert [t.result() for t in tasks] == [4, 9, 16]
    # sacct's rows as submitit reads them: each task's own (12_0, 12_1, ...) ends COMPLETED.
    assert wait_for(lambda: {t.get_info()["State"] for t in tasks} == {"COMPLETED"})


def test_a_failing_function_raises_with_its_traceback(cluster: Path) -> None:
    job = _executor(cluster).submit(_fails, 7)
    with pytest.raises(submitit.core.utils.FailedJobError) as raised:
        job.result()
    assert "ValueError: cannot take 7" in str(raised.value)
    assert "in _fails" in str(raised.value)  # the traceback, from the job's own interpreter
    assert wait_for(lambda: job.get_info()["State"] == "FAILED")


def test_cancel_ends_the_job_as_cancelled(cluster: Path) -> None:
    job = _executor(cluster).submit(time.sleep, 300)
    job.cancel()
    assert wait_for(lambda: job.done(force_check=True), timeout_s=60)
    assert job.state == "CANCELLED"


def test_a_checkpointable_job_at_its_time_limit_is_requeued_and_resumes(cluster: Path) -> None:
    # --time=1 with --signal=USR2@50: the warning 10 s in. submitit's handler checkpoints,
    # runs `scontrol requeue` and exits; the job runs again from the checkpoint, and ends.
    runs = cluster / "runs.txt"
    job = _executor(cluster).submit(_Counts(str(runs)), 14)
    assert job.result() == "counted to 14"
    first, second = runs.read_text().splitlines()
    assert first == "run 0 from 0"
    assert second.startswith("run 1 from ") and int(second.split()[-1]) >= 1
    assert wait_for(lambda: job.get_info()["State"] == "COMPLETED")


# -- Lightning ---------------------------------------------------------------------------------
_LIGHTNING_JOB = """#!/bin/bash
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --time=1
#SBATCH --signal=SIGUSR1@45
srun {python} {train} {checkpoints}
"""


def test_lightnings_auto_requeue_checkpoints_at_the_time_limit_and_resumes(cluster: Path) -> None:
    # Lightning's header, with a 1-minute limit: the warning 15 s in (tests/e2e/
    # lightning_requeue.py holds it until 3 steps are trained). The requeued run restores the
    # hpc checkpoint and ends; `sbatch --wait` waits across both runs.
    pytest.importorskip("pytorch_lightning")
    work = cluster / "lightning"
    work.mkdir()
    script = work / "job.sh"
    script.write_text(_LIGHTNING_JOB.format(
        python=sys.executable, train=Path(__file__).with_name("lightning_requeue.py"),
        checkpoints=work / "checkpoints"))  # fmt: skip
    done = subprocess.run(["sbatch", "--wait", "--parsable", str(script)], cwd=work,
                          capture_output=True, text=True, timeout=240)  # fmt: skip
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    told = ("run ", "Handling auto-requeue", "Restored all states")
    output = (work / f"slurm-{job_id}.out").read_text()
    runs = [line for line in output.splitlines() if line.startswith(told)]
    # Its `scontrol requeue` said it worked (not killed by the stop it caused: "failed with
    # error code -15").
    assert "Requeuing SLURM job" not in output
    assert runs[:3] == [
        "run 0 starts at step 0",
        "Handling auto-requeue signal: 10",
        f"Restored all states from the checkpoint at {work / 'checkpoints' / 'hpc_ckpt_1.ckpt'}",
    ]
    # The second run starts where the checkpoint was taken (3 steps in, or later if the
    # warning came later), and ends 2 steps on.
    resumed = int(runs[3].removeprefix("run 1 starts at step "))
    assert resumed >= 3 and runs[4:] == [f"run 1 ends at step {resumed + 2}"]
    accounted = subprocess.run(["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "State,ExitCode"],
                               capture_output=True, text=True, check=True)  # fmt: skip
    assert accounted.stdout.split() == ["COMPLETED|0:0"]
