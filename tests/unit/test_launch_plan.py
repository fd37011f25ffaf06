"""One recipe for a launch: `launch_plan` decides the command, the environment and the
per-node commands; executors only carry them out."""

from __future__ import annotations

import json

from gpuyard.adapters.executor.status import parse_status
from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.states import JobState
from gpuyard.services.launch.plan import launch_plan, node_argv
from gpuyard.services.ports import RunAs


def _job(distributed: str | None = None, nodes: int = 1, gpus: tuple[int, ...] = (0, 1)) -> Job:
    spec = JobSpec(
        argv=("python", "train.py"), name="t", workdir="/data/run", gpus=len(gpus), nodes=nodes,
        distributed=distributed, time_limit_s=600, env=(("MINE", "1"),),
    )  # fmt: skip
    return Job(9, spec, "ada", JobState.RUNNING, submitted_at=1.0, gpus=gpus, restarts=2)


def test_a_plan_carries_the_command_env_workdir_log_and_limit() -> None:
    plan = launch_plan(_job(), {"PATH": "/bin", "GPUYARD_TOKEN": "x"}, None, None, "/l/out.log")
    assert plan.argv == ("python", "train.py")
    assert plan.workdir == "/data/run" and plan.log_path == "/l/out.log"
    assert plan.time_limit_s == 600 and plan.stop_signal == 15 and plan.run_as is None
    assert plan.env["MINE"] == "1" and plan.env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert plan.env["GPUYARD_RESTART_COUNT"] == "2" and "GPUYARD_TOKEN" not in plan.env


def test_a_torchrun_plan_runs_torchrun_on_the_port_given() -> None:
    plan = launch_plan(_job("torchrun"), {}, None, 29877, "/l")
    assert "--master-port=29877" in plan.argv and "--nproc-per-node=2" in plan.argv
    assert plan.env["GPUYARD_DISTRIBUTED"] == "torchrun"


def test_each_node_s_command_comes_from_the_plan_not_the_executor() -> None:
    job = _job("torchrun", nodes=2, gpus=(0, 1, 2, 3))
    plan = launch_plan(job, {}, None, 29877, "/l")
    assert plan.argv_for is not None
    assert plan.argv_for(1, "10.0.0.5", 40000) == node_argv(job, 1, "10.0.0.5", 40000)


def test_a_job_run_as_another_user_gets_that_users_identity_unless_it_set_its_own() -> None:
    who = RunAs(
        user="ada", uid=1000, gid=1000, groups=(1000, 27), home="/home/ada", shell="/bin/zsh"
    )
    base = {"HOME": "/root", "USER": "root", "PATH": "/bin"}
    plan = launch_plan(_job(), base, None, None, "/l", run_as=who)
    assert plan.run_as == who
    assert (plan.env["HOME"], plan.env["USER"], plan.env["LOGNAME"]) == ("/home/ada", "ada", "ada")
    assert plan.env["SHELL"] == "/bin/zsh"
    spec = JobSpec(argv=("x",), name="t", workdir="/", env=(("HOME", "/scratch/ada"),))
    own = Job(3, spec, "ada", JobState.RUNNING, submitted_at=1.0)
    assert launch_plan(own, base, None, None, "/l", run_as=who).env["HOME"] == "/scratch/ada"


def _status(**fields: object) -> str:
    data: dict[str, object] = {"exit_code": 0, "signal": None, "timed_out": False, "ended_at": 50.0}
    data.update(fields)
    return json.dumps(data)


def test_a_status_is_clamped_between_the_jobs_start_and_now() -> None:
    assert parse_status(_status(ended_at=0), 1000.0, 1060.0).ended_at == 1000.0  # type: ignore[union-attr]
    assert parse_status(_status(ended_at=9e9), 1000.0, 1060.0).ended_at == 1060.0  # type: ignore[union-attr]
    found = parse_status(_status(ended_at=1030.5, stop_requested=True), 1000.0, 1060.0)
    assert found is not None and found.ended_at == 1030.5 and found.stop_requested
    killed = parse_status(_status(exit_code=None, signal=9), 1000.0, 1060.0)
    assert killed is not None and killed.signal == 9 and killed.exit_code is None


def test_a_status_of_the_wrong_shape_is_not_a_status() -> None:
    for text in (
        "", "[]", "garbage",
        _status(exit_code="0"), _status(exit_code=True), _status(exit_code=300),
        _status(signal=0, exit_code=None), _status(exit_code=None), _status(signal=9),
        _status(timed_out=0), _status(ended_at="1"), _status(ended_at=None),
        _status(stop_requested="yes"), '{"exit_code": 0, "signal": null, "ended_at": NaN}',
    ):  # fmt: skip
        assert parse_status(text, 1000.0, 1060.0) is None, text


def test_a_status_carries_what_the_jobs_processes_used_when_it_says() -> None:
    used = parse_status(_status(max_rss_kib=204800, cpu_time_s=1.25), 1000.0, 1060.0)
    assert used is not None and (used.max_rss_kib, used.cpu_time_s) == (204800, 1.25)
    older = parse_status(_status(), 1000.0, 1060.0)  # a supervisor from before: not measured
    assert older is not None and (older.max_rss_kib, older.cpu_time_s) == (None, None)
    odd = parse_status(_status(max_rss_kib=-1, cpu_time_s=True), 1000.0, 1060.0)
    assert odd is not None and (odd.max_rss_kib, odd.cpu_time_s) == (None, None)


def test_a_copied_script_runs_from_the_job_folder_in_its_slot() -> None:
    """sbatch runs its copy of the script: editing the original after submit changes nothing."""
    spec = JobSpec(argv=("/bin/sh", "/home/ada/job.sh", "a1"), name="job.sh", workdir="/w",
                   script="#!/bin/sh\necho hi\n", script_index=1)  # fmt: skip
    job = Job(9, spec, "ada", JobState.RUNNING, submitted_at=1.0)
    plan = launch_plan(job, {}, None, None, "/state/jobs/9/output.log")
    assert plan.argv == ("/bin/sh", "/state/jobs/9/script", "a1")
    assert plan.script == ("/state/jobs/9/script", "#!/bin/sh\necho hi\n")
    assert launch_plan(_job(), {}, None, None, "/l/out.log").script is None
