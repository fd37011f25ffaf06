"""The same batch script on Debian's Slurm 22.05 and on gpuyard, side by side: what the script
sees (the SLURM_* variables, each srun task's CUDA_VISIBLE_DEVICES) and what Slurm's tools
show of it (sacct's State and ExitCode, squeue of an ended job, sbatch --wait's exit code,
--test-only, --hold, afterok on a failed parent), normalised for job ids and GPU numbers.
Each test fails when gpuyard's side answers otherwise than Slurm's."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.server import ServerProcess, wait_for
from tests.slurm_side.real_slurm import RealSlurm

ENV_NAMES = (
    "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_MAX",
    "SLURM_ARRAY_TASK_STEP", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS",
    "SLURM_GPUS_PER_NODE", "SLURM_GPUS_PER_TASK", "SLURM_JOB_DEPENDENCY", "SLURM_GPU_BIND",
    "CUDA_VISIBLE_DEVICES",
)  # fmt: skip
ENV_SCRIPT = "#!/bin/sh\n" + "".join(f'echo "{n}=${{{n}-unset}}"\n' for n in ENV_NAMES)


def _gpuyard_sbatch(gpuyard: ServerProcess, cwd: Path, *args: str) -> tuple[str, int]:
    """`gpuyard sbatch --wait --parsable ARGS`: the job's id and sbatch's exit code."""
    result = gpuyard.cli("sbatch", "--wait", "--parsable", *args, cwd=cwd, check=False)
    assert result.stdout.strip(), result.stderr
    return result.stdout.strip().splitlines()[0], result.returncode


def _slurm_sbatch(slurm: RealSlurm, cwd: Path, *args: str) -> str:
    job_id = slurm.sbatch(*args, cwd=cwd)
    slurm.wait_ended(job_id)
    return job_id


def _dirs(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "slurm").mkdir()
    (tmp_path / "gpuyard").mkdir()
    for side in ("slurm", "gpuyard"):
        (tmp_path / side / "env.sh").write_text(ENV_SCRIPT)
    return tmp_path / "slurm", tmp_path / "gpuyard"


def _env(out: Path, job_id: str) -> dict[str, str]:
    """The variables the script printed; `job_id` in the dependency is JOB, a GPU list its
    length."""
    env = dict(line.split("=", 1) for line in out.read_text().splitlines() if "=" in line)
    if "SLURM_JOB_DEPENDENCY" in env:
        env["SLURM_JOB_DEPENDENCY"] = re.sub(rf"\b{job_id}\b", "JOB", env["SLURM_JOB_DEPENDENCY"])
    if env.get("CUDA_VISIBLE_DEVICES", "unset") not in ("unset", ""):
        env["CUDA_VISIBLE_DEVICES"] = f"{len(env['CUDA_VISIBLE_DEVICES'].split(','))} GPUs"
    return env


def _as_gpuyard_differs(slurm_env: dict[str, str]) -> dict[str, str]:
    """Slurm's variables with gpuyard's documented difference (docs/cli.md, "Checked against
    Slurm"): a job on no GPUs gets an empty CUDA_VISIBLE_DEVICES (no GPU visible without a
    device cgroup), where Slurm leaves it unset."""
    if slurm_env.get("CUDA_VISIBLE_DEVICES") == "unset":
        return {**slurm_env, "CUDA_VISIBLE_DEVICES": ""}
    return slurm_env


@pytest.mark.parametrize(
    "args",
    [
        pytest.param((), id="one-task-job"),
        pytest.param(("--ntasks-per-node=1",), id="ntasks-per-node-1"),
        pytest.param(("--gpus-per-node=2",), id="gpus-per-node"),
        pytest.param(("-n", "2", "--gpus-per-task=1", "--gpu-bind=map_gpu:1,0"),
                     id="gpus-per-task-and-gpu-bind"),
    ],
)
def test_the_slurm_variables_a_script_reads_are_slurms(
    slurm: RealSlurm, gpuyard: ServerProcess, tmp_path: Path, args: tuple[str, ...]
) -> None:
    """Each submission also depends (afterany) on an ended job, for SLURM_JOB_DEPENDENCY."""
    on_slurm, on_gpuyard = _dirs(tmp_path)
    before_s = _slurm_sbatch(slurm, on_slurm, "-o", "/dev/null", "--wrap", "true")
    before_g, _ = _gpuyard_sbatch(gpuyard, on_gpuyard, "-o", "/dev/null", "--wrap", "true")
    slurm_id = _slurm_sbatch(slurm, on_slurm, "-o", "out.txt", "-d", f"afterany:{before_s}",
                             *args, "env.sh")  # fmt: skip
    gpuyard_id, code = _gpuyard_sbatch(gpuyard, on_gpuyard, "-o", "out.txt",
                                       "-d", f"afterany:{before_g}", *args, "env.sh")  # fmt: skip
    assert code == 0
    slurm_env = _env(on_slurm / "out.txt", before_s)
    assert slurm_env["SLURM_JOB_DEPENDENCY"] == "afterany:JOB"  # the check checks itself
    assert _env(on_gpuyard / "out.txt", before_g) == _as_gpuyard_differs(slurm_env), (
        slurm_id, gpuyard_id)  # fmt: skip


def test_an_array_tasks_variables_are_slurms(
    slurm: RealSlurm, gpuyard: ServerProcess, tmp_path: Path
) -> None:
    on_slurm, on_gpuyard = _dirs(tmp_path)
    slurm_id = _slurm_sbatch(slurm, on_slurm, "--array=0-12:4", "-o", "out-%a.txt", "env.sh")
    gpuyard_id, code = _gpuyard_sbatch(gpuyard, on_gpuyard, "--array=0-12:4", "-o", "out-%a.txt",
                                       "env.sh")  # fmt: skip
    assert code == 0
    for index in (0, 4, 12):
        slurm_env = _env(on_slurm / f"out-{index}.txt", slurm_id)
        assert slurm_env["SLURM_ARRAY_TASK_COUNT"] == "4"
        assert _env(on_gpuyard / f"out-{index}.txt", gpuyard_id) == _as_gpuyard_differs(slurm_env)


# Each srun task's GPUs, as positions in the batch step's CUDA_VISIBLE_DEVICES (Slurm's fake
# devices are 0..3, gpuyard's the GPUs it gave the job).
_PER_TASK = (
    'echo "batch $CUDA_VISIBLE_DEVICES"\n'
    "srun sh -c 'echo \"task $SLURM_PROCID $CUDA_VISIBLE_DEVICES\"'\n"
    "srun --gpu-bind=map_gpu:1,0 sh -c 'echo \"bound $SLURM_PROCID $CUDA_VISIBLE_DEVICES\"'\n"
)


def _positions(out: Path) -> list[str]:
    lines = out.read_text().splitlines()
    batch = next(line for line in lines if line.startswith("batch ")).split()[1].split(",")
    return sorted(f"{kind} {rank} gpu#{','.join(str(batch.index(g)) for g in gpus.split(','))}"
                  for kind, rank, gpus in (line.split() for line in lines
                                           if line.startswith(("task ", "bound "))))  # fmt: skip


def test_each_srun_tasks_gpus_are_slurms(
    slurm: RealSlurm, gpuyard: ServerProcess, tmp_path: Path
) -> None:
    """`-n 2 --gpus-per-task=1`: srun gives task i the job's i-th GPU; `--gpu-bind=map_gpu:1,0`
    swaps them."""
    on_slurm, on_gpuyard = _dirs(tmp_path)
    for side in (on_slurm, on_gpuyard):
        (side / "tasks.sh").write_text("#!/bin/sh\n" + _PER_TASK)
    _slurm_sbatch(slurm, on_slurm, "-n", "2", "--gpus-per-task=1", "-o", "out.txt", "tasks.sh")
    _, code = _gpuyard_sbatch(gpuyard, on_gpuyard, "-n", "2", "--gpus-per-task=1", "-o",
                              "out.txt", "tasks.sh")  # fmt: skip
    assert code == 0
    slurm_seen = _positions(on_slurm / "out.txt")
    assert slurm_seen == ["bound 0 gpu#1", "bound 1 gpu#0", "task 0 gpu#0", "task 1 gpu#1"]
    assert _positions(on_gpuyard / "out.txt") == slurm_seen


def _slurm_sacct(slurm: RealSlurm, job_id: str) -> list[str]:
    """Slurm's sacct from its job-completion records (`-c`): the throw-away cluster has no
    slurmdbd, so the job's own row only (no .batch/.extern steps)."""
    out = slurm.run("sacct", "-c", "-j", job_id, "--format=JobID,State,ExitCode", "-P", "-n")
    return [re.sub(rf"^{job_id}\b", "JOB", row) for row in out.stdout.splitlines()]


def _gpuyard_sacct(gpuyard: ServerProcess, job_id: str) -> list[str]:
    out = gpuyard.cli("sacct", "-X", "-j", job_id, "--format=JobID,State,ExitCode", "-P", "-n")
    return [re.sub(rf"^{job_id}\b", "JOB", row) for row in out.stdout.splitlines()]


def test_sbatch_wait_sacct_and_squeue_of_a_job_that_exits_3_are_slurms(
    slurm: RealSlurm, gpuyard: ServerProcess, tmp_path: Path
) -> None:
    on_slurm, on_gpuyard = _dirs(tmp_path)
    waited = slurm.run("sbatch", "--wait", "--parsable", "-o", "/dev/null", "--wrap", "exit 3",
                       cwd=on_slurm)  # fmt: skip
    slurm_id = waited.stdout.strip()
    gpuyard_id, code = _gpuyard_sbatch(gpuyard, on_gpuyard, "-o", "/dev/null", "--wrap", "exit 3")
    assert (waited.returncode, code) == (3, 3)
    assert _slurm_sacct(slurm, slurm_id) == ["JOB|FAILED|3:0"]
    assert _gpuyard_sacct(gpuyard, gpuyard_id) == _slurm_sacct(slurm, slurm_id)
    # The classic `while squeue -h -j $ID | grep -q .` wait ends on both.
    assert slurm.run("squeue", "-h", "-j", slurm_id).stdout == ""
    assert gpuyard.cli("squeue", "-h", "-j", gpuyard_id).stdout == ""


def test_sacct_of_a_cancelled_job_is_slurms(
    slurm: RealSlurm, gpuyard: ServerProcess, tmp_path: Path
) -> None:
    on_slurm, on_gpuyard = _dirs(tmp_path)
    slurm_id = slurm.sbatch("-o", "/dev/null", "--wrap", "sleep 300", cwd=on_slurm)
    gpuyard_id = gpuyard.cli("sbatch", "--parsable", "-o", "/dev/null", "--wrap", "sleep 300",
                             cwd=on_gpuyard).stdout.strip()  # fmt: skip
    wait_for(lambda: slurm.field(slurm_id, "JobState") == "RUNNING")
    wait_for(lambda: gpuyard.client().job(int(gpuyard_id))["state"] == "RUNNING")
    slurm.run("scancel", slurm_id)
    gpuyard.cli("scancel", gpuyard_id)
    slurm.wait_ended(slurm_id)
    wait_for(lambda: gpuyard.client().job(int(gpuyard_id))["state"] == "CANCELLED")
    assert _slurm_sacct(slurm, slurm_id)[0].startswith("JOB|CANCELLED")
    assert _gpuyard_sacct(gpuyard, gpuyard_id) == _slurm_sacct(slurm, slurm_id)


_TEST_ONLY = re.compile(r"sbatch: Job \d+ to start at \S+ using 1 processors on nodes \S+ in "
                        r"partition \S+")  # fmt: skip


def test_test_only_answers_in_sbatchs_words_and_queues_nothing(
    slurm: RealSlurm, gpuyard: ServerProcess, tmp_path: Path
) -> None:
    """Slurm 22.05's start estimate on the throw-away cluster is a date far in the future; the
    line's shape is compared, not the date."""
    slurm_before = slurm.run("squeue", "-h", "-t", "all", "-o", "%i").stdout
    gpuyard_before = gpuyard.cli("squeue", "-h", "-t", "all", "-o", "%i").stdout
    on_slurm = slurm.run("sbatch", "--test-only", "--wrap", "true", cwd=tmp_path)
    on_gpuyard = gpuyard.cli("sbatch", "--test-only", "--wrap", "true", cwd=tmp_path)
    for result in (on_slurm, on_gpuyard):
        assert result.returncode == 0 and result.stdout == ""
        assert _TEST_ONLY.fullmatch(result.stderr.strip().splitlines()[-1]), result.stderr
    assert slurm.run("squeue", "-h", "-t", "all", "-o", "%i").stdout == slurm_before
    assert gpuyard.cli("squeue", "-h", "-t", "all", "-o", "%i").stdout == gpuyard_before


def test_hold_then_scontrol_release_is_slurms(
    slurm: RealSlurm, gpuyard: ServerProcess, tmp_path: Path
) -> None:
    on_slurm, on_gpuyard = _dirs(tmp_path)
    slurm_id = slurm.sbatch("--hold", "-o", "/dev/null", "--wrap", "touch ran", cwd=on_slurm)
    gpuyard_id = gpuyard.cli("sbatch", "--parsable", "--hold", "-o", "/dev/null", "--wrap",
                             "touch ran", cwd=on_gpuyard).stdout.strip()  # fmt: skip
    held = slurm.run("squeue", "-h", "-j", slurm_id, "-o", "%t %r").stdout
    assert held.strip() == "PD JobHeldUser"
    assert gpuyard.cli("squeue", "-h", "-j", gpuyard_id, "-o", "%t %r").stdout == held
    assert not (on_slurm / "ran").exists() and not (on_gpuyard / "ran").exists()
    assert slurm.run("scontrol", "release", slurm_id).returncode == 0
    assert gpuyard.cli("scontrol", "release", gpuyard_id, check=False).returncode == 0
    assert slurm.wait_ended(slurm_id) == "COMPLETED"
    wait_for(lambda: gpuyard.client().job(int(gpuyard_id))["state"] == "COMPLETED")
    assert (on_slurm / "ran").exists() and (on_gpuyard / "ran").exists()


def test_afterok_on_a_failed_parent_leaves_the_child_pending_as_slurm_does(
    slurm: RealSlurm, gpuyard: ServerProcess, tmp_path: Path
) -> None:
    on_slurm, on_gpuyard = _dirs(tmp_path)
    parent_s = _slurm_sbatch(slurm, on_slurm, "-o", "/dev/null", "--wrap", "exit 3")
    parent_g, _ = _gpuyard_sbatch(gpuyard, on_gpuyard, "-o", "/dev/null", "--wrap", "exit 3")
    child_s = slurm.sbatch("-d", f"afterok:{parent_s}", "-o", "/dev/null", "--wrap", "true",
                           cwd=on_slurm)  # fmt: skip
    child_g = gpuyard.cli("sbatch", "--parsable", "-d", f"afterok:{parent_g}", "-o", "/dev/null",
                          "--wrap", "true", cwd=on_gpuyard).stdout.strip()  # fmt: skip

    def row_s() -> str:
        return slurm.run("squeue", "-h", "-j", child_s, "-o", "%t %r").stdout.strip()

    def row_g() -> str:
        return gpuyard.cli("squeue", "-h", "-j", child_g, "-o", "%t %r").stdout.strip()

    try:
        assert wait_for(lambda: row_s() == "PD DependencyNeverSatisfied" and row_s())
        assert wait_for(lambda: row_g() == row_s() and row_g())
    finally:
        slurm.run("scancel", child_s)
        gpuyard.cli("scancel", child_g, check=False)


def test_real_slurm_is_the_one_answering(slurm: RealSlurm) -> None:
    """The comparison means something only if the Slurm side is Slurm's own sinfo."""
    version = subprocess.run(["sinfo", "--version"], capture_output=True, text=True,
                             env=slurm.env, check=False)  # fmt: skip
    assert version.stdout.startswith("slurm"), version


_WARNED = (
    "#!/bin/bash\n"
    "srun {python} -c '\n"
    "import signal, sys\n"
    'signal.signal(signal.SIGUSR1, lambda *_: (print("step got USR1", flush=True), '
    "sys.exit(0)))\n"
    "signal.pause()\n"
    "'\n"
    'echo "shell carried on"\n'
)


def test_signal_without_b_reaches_the_step_and_spares_the_batch_shell_as_slurm_does(
    slurm: RealSlurm, gpuyard: ServerProcess, tmp_path: Path
) -> None:
    """`--time=1 --signal=USR1@59`: the warning is due 1 s in (Slurm sends it at its next
    time-limit check, within about 30 s); the srun step's Python gets it, the `#!/bin/bash`
    batch shell around it carries on and the job completes before its limit."""
    on_slurm, on_gpuyard = _dirs(tmp_path)
    for side in (on_slurm, on_gpuyard):
        (side / "warned.sh").write_text(_WARNED.format(python=sys.executable))
    args = ("--time=1", "--signal=USR1@59", "-o", "out.txt", "warned.sh")
    slurm_id = slurm.sbatch(*args, cwd=on_slurm)
    gpuyard_id, code = _gpuyard_sbatch(gpuyard, on_gpuyard, *args)
    assert slurm.wait_ended(slurm_id, timeout_s=120) == "COMPLETED"
    slurm_lines = (on_slurm / "out.txt").read_text().splitlines()
    assert slurm_lines == ["step got USR1", "shell carried on"]
    assert (on_gpuyard / "out.txt").read_text().splitlines() == slurm_lines
    assert code == 0 and gpuyard.client().job(int(gpuyard_id))["state"] == "COMPLETED"


def test_a_warning_not_before_the_limit_is_refused_in_one_line_unlike_slurm(
    gpuyard: ServerProcess, tmp_path: Path
) -> None:
    """The documented difference (docs/cli.md, "Checked against Slurm"): Slurm takes
    `--time=1 --signal=USR1@60` and signals at once; gpuyard refuses it at submit, in the
    option's own words, and queues nothing."""
    refused = gpuyard.cli("sbatch", "--time=1", "--signal=USR1@60", "--wrap", "true",
                          cwd=tmp_path, check=False)  # fmt: skip
    assert refused.returncode != 0 and refused.stdout == ""
    assert refused.stderr.splitlines() == [
        "gpuyard: --signal SIG@60 (warn_before_s): 60 s before the time limit (60 s) is its "
        "start; give a shorter @SECONDS or a longer --time"]  # fmt: skip
