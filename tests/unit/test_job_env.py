"""The one recipe for a job's environment."""

from __future__ import annotations

from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.states import JobState
from gpuyard.jobhooks import HOOK_DIR
from gpuyard.services.launch.env import build_job_env
from gpuyard.services.ports import RunAs


def test_server_settings_never_reach_a_job_but_the_users_own_env_does() -> None:
    spec = JobSpec(argv=("x",), name="n", workdir="/", gpus=2, env=(("GPUYARD_MINE", "1"),))
    job = Job(1, spec, "me", JobState.RUNNING, 0.0, gpus=(1, 3))
    base = {
        "PATH": "/bin",
        "GPUYARD_TOKEN": "secret",
        "GPUYARD_DATABASE_URL": "postgresql://u:pw@h/db",
        "RAY_AUTH_TOKEN": "cluster-secret",  # the server's Ray cluster token (--backend ray)
        "RAY_AUTH_TOKEN_PATH": "/state/ray_auth_token",
    }
    env = build_job_env(job, base)
    assert "GPUYARD_TOKEN" not in env and "GPUYARD_DATABASE_URL" not in env
    assert not any(key.startswith("RAY_AUTH") for key in env)
    assert env["GPUYARD_MINE"] == "1" and env["PATH"] == "/bin"
    assert env["CUDA_VISIBLE_DEVICES"] == "1,3" and env["GPUYARD_NUM_GPUS"] == "2"


def test_a_job_run_as_a_user_gets_their_home_not_the_servers() -> None:
    who = RunAs(user="ada", uid=1000, gid=1000, groups=(1000,), home="/home/ada")
    job = Job(1, JobSpec(argv=("x",), name="n", workdir="/"), "ada", JobState.RUNNING, 0.0)
    env = build_job_env(job, {"HOME": "/root", "USER": "root", "SHELL": "/bin/bash"}, None, who)
    assert (env["HOME"], env["USER"], env["LOGNAME"], env["SHELL"]) == (
        "/home/ada",
        "ada",
        "ada",
        "/bin/sh",
    )


def test_only_an_allowlist_of_the_servers_environment_reaches_a_job() -> None:
    """The server's secrets (cloud credentials, a database password, whatever its admin's
    shell held) never reach a job; what the submitter sent does."""
    spec = JobSpec(argv=("x",), name="n", workdir="/", env=(("AWS_PROFILE", "mine"),))
    job = Job(1, spec, "me", JobState.RUNNING, 0.0)
    base = {
        "PATH": "/bin", "LANG": "C.UTF-8", "LC_ALL": "C", "TZ": "UTC", "TERM": "xterm",
        "AWS_SECRET_ACCESS_KEY": "secret", "PGPASSWORD": "secret", "HOME": "/root",
        "LD_PRELOAD": "/evil.so", "PYTHONPATH": "/server/only",
    }  # fmt: skip
    env = build_job_env(job, base)
    assert "secret" not in env.values()
    for allowed in ("PATH", "LANG", "LC_ALL", "TZ", "TERM"):
        assert env[allowed] == base[allowed]
    assert not {"HOME", "LD_PRELOAD"} & env.keys()  # HOME: the run-as user's
    assert env["PYTHONPATH"] == HOOK_DIR  # gpuyard's startup hook alone, not the server's
    assert env["AWS_PROFILE"] == "mine"
