"""Per-job environments (`--venv`, `--python`, `--container`): a real server runs jobs in a
virtualenv the test makes (`python3 -m venv` of the system's python, no packages) and with a
chosen interpreter; one that cannot be run fails the job at launch in one line; a container
job is refused in one line where no runtime is installed. The container recipes (apptainer,
podman) are pure and checked as such: no image can be fetched here."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuyard.adapters.executor.container_runtime import find_container_runtime
from gpuyard.adapters.identity import unix_identity
from gpuyard.domain.errors import GpuyardError, InvalidRequest
from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.states import JobState
from gpuyard.services.launch.plan import check_container, container_argv, launch_plan
from gpuyard.services.launch.run_as import RunAsPolicy
from gpuyard.services.ports import ContainerRuntime
from tests.e2e.server import ServerProcess, wait_ended
from tests.e2e.unix_users import UnixUsers

SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin")
SHOW = "import os, sys; print(sys.executable, sys.prefix, os.environ.get('VIRTUAL_ENV', '-'))"


@pytest.fixture(scope="module")
def venv() -> Iterator[Path]:
    """A real virtualenv, in a folder every user may enter (a root server's jobs run as their
    owners)."""
    if SYSTEM_PYTHON is None:
        pytest.skip("no system python3 to make a virtualenv with")
    folder = Path(tempfile.mkdtemp(prefix="gpuyard-venv-", dir="/tmp"))
    folder.chmod(0o755)
    made = folder / "env"
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", "--without-pip", str(made)], check=True)
    yield made
    shutil.rmtree(folder, ignore_errors=True)


def log_of(server: ServerProcess, job_id: int) -> str:
    return (server.state_dir / "jobs" / str(job_id) / "output.log").read_text()


def test_a_job_runs_in_its_venv(server: ServerProcess, venv: Path):
    with server.client() as client:
        job = client.submit(["python", "-c", SHOW], venv=str(venv), env={"PYTHONHOME": "/x"})
        ended = wait_ended(client, job["id"])
    assert ended["state"] == "COMPLETED", log_of(server, job["id"])
    executable, prefix, virtual_env = log_of(server, job["id"]).split()
    assert Path(executable).parent == venv / "bin"
    assert (prefix, virtual_env) == (str(venv), str(venv))  # PYTHONHOME: dropped


def test_a_job_runs_the_interpreter_it_names(server: ServerProcess, venv: Path):
    """`--python PATH`: a `python3` command is that interpreter, its folder first on PATH."""
    chosen = str(venv / "bin" / "python3")
    script = SHOW + "; print(os.environ['PATH'].split(':')[0])"
    with server.client() as client:
        job = client.submit(["python3", "-c", script], python=chosen)
        assert wait_ended(client, job["id"])["state"] == "COMPLETED"
    executable, prefix, _, first_on_path = log_of(server, job["id"]).split()
    assert (executable, prefix, first_on_path) == (chosen, str(venv), str(venv / "bin"))


def test_an_interpreter_that_is_not_there_is_refused_at_submit_in_one_line(
    server: ServerProcess, tmp_path: Path
):
    """Not queued to fail LaunchFailed after its wait (issue 26): the README's own
    `--venv ~/envs/jax` on a machine without it."""
    nope = str(tmp_path / "nope/python3")
    refused = server.cli("submit", "--python", nope, "--", "python3", "-c", "pass", check=False)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1
    assert refused.stderr.startswith(f"gpuyard: --python {nope}: {nope} does not exist")
    gone = server.cli("submit", "--venv", str(tmp_path), "--", "python", "-V", check=False)
    assert gone.returncode == 1 and gone.stderr.count("\n") == 1  # a folder, not a venv
    assert gone.stderr.startswith(f"gpuyard: --venv {tmp_path}: ")
    assert "python3 -m venv" in gone.stderr
    assert server.client().jobs(all=True) == []  # nothing was queued


def test_a_container_job_where_no_runtime_is_installed_is_refused_in_one_line(
    server: ServerProcess,
):
    if find_container_runtime() is not None:
        pytest.skip("a container runtime is installed here: containers are accepted")
    with server.client() as client, pytest.raises(GpuyardError) as refused:
        client.submit(["python", "train.py"], container="docker.io/pytorch/pytorch:latest")
    message = str(refused.value)
    assert "apptainer" in message and "podman" in message and "--venv" in message
    assert "\n" not in message


# -- as the job's user, on a root server ---------------------------------------------------
def test_an_interpreter_its_user_cannot_reach_fails_at_launch(users: UnixUsers, venv: Path):
    """A venv in a folder only root may enter (root's home, a server's venv): alice's job
    cannot run it, and is told so before anything starts; bob's folder's venv she can."""
    hidden = Path(tempfile.mkdtemp(prefix="gpuyard-hidden-", dir="/tmp"))  # 0700, root's
    try:
        shutil.copytree(venv, hidden / "env", symlinks=True)
        alice = RunAsPolicy(unix_identity, 0, "root").for_owner(users.alice)
        spec = JobSpec(argv=("python", "-V"), name="t", workdir="/", venv=str(hidden / "env"))
        job = Job(1, spec, users.alice, JobState.RUNNING, 0.0)
        with pytest.raises(ValueError, match=f"cannot be entered for {users.alice}"):
            launch_plan(job, {"PATH": "/usr/bin:/bin"}, None, None, "/j/1/output.log", alice)
        spec = JobSpec(argv=("python", "-V"), name="t", workdir="/", venv=str(venv))
        plan = launch_plan(
            Job(2, spec, users.alice, JobState.RUNNING, 0.0), {"PATH": "/bin"}, None, None,
            "/j/2/output.log", alice,
        )  # fmt: skip
        assert plan.env["PATH"].startswith(f"{venv}/bin:")
    finally:
        shutil.rmtree(hidden, ignore_errors=True)


# -- the container recipes ---------------------------------------------------------------
ENV = {"PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "1,3", "SLURM_JOB_ID": "9", "HOME": "/h"}


def test_apptainer_runs_the_job_with_its_gpus_and_only_its_variables() -> None:
    runtime = ContainerRuntime("apptainer", "/usr/bin/apptainer")
    argv, env = container_argv(
        runtime, "img.sif", ["python", "t.py"], ENV, "/w", (1, 3), 1000, ("/s/jobs/7",)
    )  # fmt: skip
    assert argv == [
        "/usr/bin/apptainer", "exec", "--nv", "--cleanenv", "--bind", "/w,/s/jobs/7",
        "--pwd", "/w", "img.sif", "python", "t.py",
    ]  # fmt: skip
    assert env["APPTAINERENV_CUDA_VISIBLE_DEVICES"] == "1,3"
    assert env["APPTAINERENV_SLURM_JOB_ID"] == "9"
    assert "APPTAINERENV_PATH" not in env and "APPTAINERENV_HOME" not in env  # the image's
    cpu_only, _ = container_argv(runtime, "img.sif", ["true"], ENV, "/w", (), 1000)
    assert "--nv" not in cpu_only
    old, env = container_argv(
        ContainerRuntime("singularity", "/s"), "i", ["true"], ENV, "/w", (0,), 0
    )  # fmt: skip
    assert old[:2] == ["/s", "exec"] and env["SINGULARITYENV_SLURM_JOB_ID"] == "9"


def test_podman_runs_the_job_in_its_cgroup_with_each_gpu_by_cdi() -> None:
    runtime = ContainerRuntime("podman", "/usr/bin/podman")
    argv, env = container_argv(
        runtime, "img", ["python", "t.py"], ENV, "/w", (1, 3), 1000, ("/s/jobs/7",)
    )  # fmt: skip
    assert argv[:2] == ["/usr/bin/podman", "run"] and argv[-3:] == ["img", "python", "t.py"]
    options = argv[2:-3]
    for wanted in ("--rm", "--cgroups=disabled", "--userns=keep-id", "--network=host",
                   "--device=nvidia.com/gpu=1", "--device=nvidia.com/gpu=3"):  # fmt: skip
        assert wanted in options
    for wanted in ("--volume=/w:/w", "--volume=/s/jobs/7:/s/jobs/7", "--workdir=/w"):
        assert wanted in options
    # Variables by name only (podman reads their values from its environment: none in `ps`).
    assert "--env=CUDA_VISIBLE_DEVICES" in options and "--env=PATH" not in options
    assert not any("1,3" in option for option in options) and env == ENV
    as_root, _ = container_argv(runtime, "img", ["true"], ENV, "/w", (), 0)
    assert "--userns=keep-id" not in as_root  # keep-id is for a user's (rootless) podman


def test_a_container_needs_a_runtime_and_one_machine() -> None:
    spec = JobSpec(argv=("t",), name="t", workdir="/", container="img")
    with pytest.raises(InvalidRequest, match=r"apptainer.*podman.*--venv"):
        check_container(spec, None)
    podman = ContainerRuntime("podman", "/usr/bin/podman")
    check_container(spec, podman)
    two = JobSpec(argv=("t",), name="t", workdir="/", container="img", nodes=2, gpus=2)
    with pytest.raises(InvalidRequest, match="one machine"):
        check_container(two, podman)


def test_the_runtime_found_is_the_first_installed(tmp_path: Path) -> None:
    for name in ("podman", "singularity"):
        tool = tmp_path / name
        tool.write_text("#!/bin/sh\n")
        tool.chmod(0o755)
    assert find_container_runtime(str(tmp_path)) == ContainerRuntime(
        "singularity", str(tmp_path / "singularity")
    )
    assert find_container_runtime(os.devnull) is None


# -- `submit --check` judges the job's own environment ---------------------------------------
def test_submit_check_probes_the_jobs_venv_or_python(venv: Path, tmp_path: Path) -> None:
    from gpuyard.cli.doctoring import _chosen_python, check_submission

    env: dict[str, str] = {"PATH": "/usr/bin:/bin", "PYTHONHOME": "/x"}
    python, why = _chosen_python({"venv": str(venv)}, env)
    assert (python, why) == (str(venv / "bin" / "python"), None)
    assert env["PATH"].startswith(f"{venv}/bin:") and "PYTHONHOME" not in env
    check_submission(["python", "-c", "pass"], {"venv": str(venv), "gpus": 0})  # no torch: fine
    with pytest.raises(GpuyardError, match="the job cannot start: --venv"):
        check_submission(["python", "-c", "pass"], {"venv": str(tmp_path), "gpus": 0})
    with pytest.raises(GpuyardError, match="the job cannot start: --python"):
        check_submission(["train.sh"], {"python": str(tmp_path / "python3"), "gpus": 0})


def test_a_container_jobs_plan_runs_its_script_in_the_image() -> None:
    """The script copied at submit, its checkpoint folder and progress file are in the job's
    folder: mounted at its own path beside the workdir."""
    spec = JobSpec(
        argv=("job.sh",), name="t", workdir="/w", gpus=1, container="img.sif",
        script="#!/bin/sh\necho hi\n",
    )  # fmt: skip
    job = Job(7, spec, "ada", JobState.RUNNING, 0.0, gpus=(2,))
    apptainer = ContainerRuntime("apptainer", "/a")
    plan = launch_plan(job, {"PATH": "/bin"}, None, None, "/s/jobs/7/output.log", None, apptainer)
    assert plan.argv == (
        "/a", "exec", "--nv", "--cleanenv", "--bind", "/w,/s/jobs/7", "--pwd", "/w", "img.sif",
        "/s/jobs/7/script",
    )  # fmt: skip
    assert plan.env["APPTAINERENV_CUDA_VISIBLE_DEVICES"] == "2"
    with pytest.raises(ValueError, match="neither apptainer"):  # the runtime went meanwhile
        launch_plan(job, {"PATH": "/bin"}, None, None, "/s/jobs/7/output.log", None, None)
