"""How a job's process is built: argv as given, torchrun per GPU, JAX/TF cluster variables."""

from __future__ import annotations

import json

from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.states import JobState
from gpuyard.services.launch.plan import job_process, node_argv, rank_failure
from gpuyard.services.launch.rendezvous import RendezvousPorts


def running(argv: tuple[str, ...], distributed: str | None, gpus: tuple[int, ...]) -> Job:
    spec = JobSpec(argv=argv, name="t", workdir="/", gpus=len(gpus), distributed=distributed)
    return Job(7, spec, "ada", JobState.RUNNING, submitted_at=1.0, gpus=gpus)


def test_a_plain_job_runs_its_argv_as_given() -> None:
    argv, env = job_process(running(("python3", "t.py"), None, (0,)), {"A": "1"}, None)
    assert (argv, env) == (["python3", "t.py"], {"A": "1"})


def test_torchrun_runs_one_process_per_gpu_on_the_port_gpuyard_chose() -> None:
    job = running(("/venv/bin/python3.11", "/w/train.py", "--lr", "3"), "torchrun", (2, 5, 6))
    argv, env = job_process(job, {}, 41234)
    assert argv == [
        "/venv/bin/python3.11", "-m", "torch.distributed.run", "--nnodes=1",
        "--nproc-per-node=3", "--node-rank=0", "--master-addr=127.0.0.1",
        "--master-port=41234", "--max-restarts=0", "/w/train.py", "--lr", "3",
    ]  # fmt: skip
    assert env["GPUYARD_DISTRIBUTED"] == "torchrun"


def test_torchrun_wraps_a_non_python_command_with_the_torchrun_script() -> None:
    argv, _ = job_process(running(("./train.sh",), "torchrun", (0, 1)), {}, 5000)
    assert argv[0] == "torchrun" and argv[-1] == "./train.sh"


def test_jax_and_tf_get_their_cluster_variables() -> None:
    _, jax = job_process(running(("python", "j.py"), "jax", (0, 1)), {}, 6000)
    assert (jax["JAX_COORDINATOR_ADDRESS"], jax["JAX_NUM_PROCESSES"], jax["JAX_PROCESS_ID"]) == (
        "127.0.0.1:6000", "1", "0",
    )  # fmt: skip
    argv, tf = job_process(running(("python", "t.py"), "tf", (0,)), {}, 6001)
    assert argv == ["python", "t.py"]
    assert json.loads(tf["TF_CONFIG"]) == {
        "cluster": {"worker": ["127.0.0.1:6001"]}, "task": {"type": "worker", "index": 0},
    }  # fmt: skip


TORCHRUN_FAILURE = """
Failures:
[1]:
  time      : 2026-11-29_17:49:31
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 21078)  (SIGTERM)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-29_17:49:31
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : 3 (pid: 21079)
  error_file: <N/A>
============================================================
"""


def test_the_failing_rank_is_read_from_torchruns_root_cause_not_the_stopped_ones() -> None:
    reason = rank_failure("step 1\n" + TORCHRUN_FAILURE)
    assert reason == (
        "RankFailed: rank 1 (local rank 1) exited with code 3; torchrun stopped the other ranks"
    )
    killed = TORCHRUN_FAILURE.replace("exitcode  : 3", "exitcode  : -9")
    assert "was killed by signal 9" in (rank_failure(killed) or "")
    assert rank_failure("Traceback: plain failure") is None


def test_rendezvous_ports_are_distinct_while_held() -> None:
    ports = RendezvousPorts()
    taken = {ports.take(job_id) for job_id in range(50)}
    assert len(taken) == 50 and 29500 not in taken


def test_torchrun_under_an_env_shebang_and_python_flags() -> None:
    shebang = ("/usr/bin/env", "python3", "/w/t.py", "-x")
    argv, _ = job_process(running(shebang, "torchrun", (0,)), {}, 7)
    assert argv[:4] == ["/usr/bin/env", "python3", "-m", "torch.distributed.run"]
    assert argv[-2:] == ["/w/t.py", "-x"]
    argv, _ = job_process(running(("python", "-u", "-X", "dev", "t.py"), "torchrun", (0,)), {}, 7)
    assert argv[:6] == ["python", "-u", "-X", "dev", "-m", "torch.distributed.run"]
    assert argv[-1] == "t.py"


def test_the_last_root_cause_is_the_one_of_the_last_run() -> None:
    earlier = TORCHRUN_FAILURE.replace("exitcode  : 3", "exitcode  : 7")
    assert "code 3" in (rank_failure(earlier + "\nrestart\n" + TORCHRUN_FAILURE) or "")


def _multinode(argv: tuple[str, ...], distributed: str | None) -> Job:
    spec = JobSpec(argv=argv, name="t", workdir="/", gpus=4, nodes=2, distributed=distributed)
    return Job(8, spec, "ada", JobState.RUNNING, submitted_at=1.0, gpus=(0, 1, 2, 3))


def test_each_node_of_a_multi_node_job_gets_its_rank_and_rank_zeros_address() -> None:
    torchrun = node_argv(_multinode(("python", "train.py"), "torchrun"), 1, "10.0.0.5", 40000)
    assert torchrun == [
        "env", "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=[rank${rank}] ", "SLURM_NODEID=1",
        "SLURM_PROCID=1", "python", "-m", "torch.distributed.run", "--nnodes=2",
        "--nproc-per-node=2", "--node-rank=1", "--master-addr=10.0.0.5", "--master-port=40000",
        "--max-restarts=0", "--tee=3", "train.py",
    ]  # fmt: skip
    jax = node_argv(_multinode(("python", "j.py"), "jax"), 1, "10.0.0.5", 40000)
    assert jax[0] == "env" and jax[-2:] == ["python", "j.py"]
    assigned = dict(kv.split("=", 1) for kv in jax[1:-2])
    assert assigned["JAX_COORDINATOR_ADDRESS"] == "10.0.0.5:40000"
    assert (assigned["JAX_NUM_PROCESSES"], assigned["JAX_PROCESS_ID"]) == ("2", "1")
    plain = node_argv(_multinode(("./run.sh",), None), 0, "10.0.0.5", 40000)
    assert plain == [
        "env", "MASTER_ADDR=10.0.0.5", "MASTER_PORT=40000", "SLURM_NODEID=0",
        "SLURMD_NODENAME=local", "SLURM_PROCID=0", "./run.sh",
    ]  # fmt: skip
