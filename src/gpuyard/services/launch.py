"""What process a job runs as: its argv as given, or wrapped for distributed training.

`--distributed torchrun` on one machine runs
    python -m torch.distributed.run --nnodes=1 --nproc-per-node=N --node-rank=0
        --master-addr=127.0.0.1 --master-port=PORT --max-restarts=0 train.py ARGS
with N the job's GPU count and PORT chosen by gpuyard (never torchrun's shared default 29500),
so every rank gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT.
torchrun starts all ranks together and, with no restarts, stops the others when one fails and
exits non-zero; `rank_failure` reads its "Root Cause" summary from the log so the job's reason
names the failing rank and its exit code.

`--distributed jax` and `--distributed tf` run the argv as is, one process on this machine that
drives the job's GPUs, with the variables `jax.distributed.initialize()` and TensorFlow's
MultiWorkerMirroredStrategy read (`TF_CONFIG`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from functools import partial

from gpuyard.domain.job import Job
from gpuyard.services.job_env import build_job_env
from gpuyard.services.ports import LaunchPlan, RunAs

LOCALHOST = "127.0.0.1"


def launch_plan(
    job: Job,
    base_env: Mapping[str, str],
    gpu_total_mib: int | None,
    port: int | None,
    log_path: str,
    run_as: RunAs | None = None,
) -> LaunchPlan:
    """The whole recipe an executor carries out for `job`: the one-machine command and
    environment (`build_job_env` + `job_process`), and `argv_for`, the command of each node
    when a backend spreads the job over machines (`node_argv`), so no adapter rebuilds it."""
    checkpoints = checkpoint_dir(log_path)
    progress = progress_file(log_path)
    env = build_job_env(job, base_env, gpu_total_mib, run_as, checkpoints, progress)
    script = script_copy(job, log_path)
    argv, env = job_process(job, env, port, script[0] if script else None)
    return LaunchPlan(
        argv=tuple(argv),
        env=env,
        workdir=job.spec.workdir,
        log_path=log_path,
        time_limit_s=job.spec.time_limit_s,
        argv_for=partial(node_argv, job),
        run_as=run_as,
        stop_signal=job.spec.stop_signal,
        script=script,
        warn_signal=job.spec.warn_signal,
        warn_before_s=job.spec.warn_before_s,
        checkpoint_dir=checkpoints,
        progress_file=progress,
    )


SCRIPT_FILE = "script"
CHECKPOINT_DIR = "checkpoint"
PROGRESS_FILE = "progress.jsonl"


def checkpoint_dir(log_path: str) -> str:
    """GPUYARD_CHECKPOINT_DIR: `checkpoint/` in the job's folder, beside its log. The same for
    every run of the job (retries, requeues, preemptions, a restart of the server), so a run
    resumes from what the one before saved; `gpuyard clean` removes it with the folder. A
    `gpuyard restart` is a new job: a folder of its own, starting empty."""
    return os.path.join(os.path.dirname(log_path), CHECKPOINT_DIR)


def progress_file(log_path: str) -> str:
    """GPUYARD_PROGRESS_FILE: `progress.jsonl` beside the job's log, appended to by every run
    (`gpuyard.progress()`), read by the server's progress service."""
    return os.path.join(os.path.dirname(log_path), PROGRESS_FILE)


def script_copy(job: Job, log_path: str) -> tuple[str, str] | None:
    """Where the script copied at submit is written (beside the job's log) and its text."""
    if job.spec.script is None:
        return None
    return os.path.join(os.path.dirname(log_path), SCRIPT_FILE), job.spec.script


def job_process(
    job: Job, env: dict[str, str], port: int | None, script_path: str | None = None
) -> tuple[list[str], dict[str, str]]:
    """The argv and environment the job's supervisor runs (`env` from `build_job_env`);
    `script_path`: the copy of the submitted script, run in place of the path it came from."""
    argv = list(job.spec.argv)
    if script_path is not None:
        argv[job.spec.script_index] = script_path
    mode = job.spec.distributed
    if mode is None:
        return argv, env
    assert port is not None, "a distributed job needs a rendezvous port"
    env = {**env, "GPUYARD_DISTRIBUTED": mode}
    if mode == "torchrun":
        return _torchrun(argv, len(job.gpus), port), env
    address = f"{LOCALHOST}:{port}"
    if mode == "jax":
        env.update(JAX_COORDINATOR_ADDRESS=address, JAX_NUM_PROCESSES="1", JAX_PROCESS_ID="0")
    elif mode == "tf":
        cluster = {"cluster": {"worker": [address]}, "task": {"type": "worker", "index": 0}}
        env["TF_CONFIG"] = json.dumps(cluster)
    return argv, env


def node_argv(job: Job, node_rank: int, master_addr: str, master_port: int) -> list[str]:
    """The command one node of a multi-node job (`--nodes N`) runs: torchrun with this node's
    rank and rank 0's address (all nodes rendezvous there); for JAX one process per node with
    the coordinator at rank 0 (`JAX_COORDINATOR_ADDRESS`, `JAX_NUM_PROCESSES` = N,
    `JAX_PROCESS_ID` = the node's rank); else the argv as it is. MASTER_ADDR/MASTER_PORT are set
    for every mode: the master is known only once the nodes are placed, so they go on the
    command line (`env K=V ...`), not in the environment shared by all nodes."""
    argv = list(job.spec.argv)
    mode = job.spec.distributed
    if mode == "torchrun":
        # Each rank's lines labelled with its global rank (`[rank2] ...`; the server labels
        # them with the node too): torchrun tees every worker's output through one reader,
        # so lines of different ranks never interleave.
        label = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=[rank${rank}] "
        torchrun = _torchrun(
            argv, job.spec.gpus_per_node, master_port, job.spec.nodes, node_rank, master_addr,
            tee=True,
        )  # fmt: skip
        return ["env", label, *torchrun]
    assigned = [f"MASTER_ADDR={master_addr}", f"MASTER_PORT={master_port}"]
    if mode == "jax":
        assigned += [
            f"GPUYARD_DISTRIBUTED={mode}",
            f"JAX_COORDINATOR_ADDRESS={master_addr}:{master_port}",
            f"JAX_NUM_PROCESSES={job.spec.nodes}",
            f"JAX_PROCESS_ID={node_rank}",
        ]
    return ["env", *assigned, *argv]


def _torchrun(
    argv: list[str],
    nproc: int,
    port: int,
    nnodes: int = 1,
    node_rank: int = 0,
    master: str = LOCALHOST,
    tee: bool = False,
) -> list[str]:
    options = [
        f"--nnodes={nnodes}", f"--nproc-per-node={nproc}", f"--node-rank={node_rank}",
        f"--master-addr={master}", f"--master-port={port}", "--max-restarts=0",
        *(["--tee=3"] if tee else []),
    ]  # fmt: skip
    python, rest = _python_of(argv)
    if python is None:
        return ["torchrun", *options, *argv]
    # `python [flags] train.py` (what a submitted script becomes): that python runs torchrun,
    # its flags stay with it.
    flags = []
    while rest and rest[0].startswith("-") and rest[0] not in ("-m", "-c"):
        flags.append(rest.pop(0))
        if flags[-1] in ("-X", "-W") and rest:  # options that take a value
            flags.append(rest.pop(0))
    return [*python, *flags, "-m", "torch.distributed.run", *options, *rest]


def _python_of(argv: list[str]) -> tuple[list[str] | None, list[str]]:
    """(`python` or `/usr/bin/env python3`, the rest) when argv runs a Python interpreter."""
    is_python = re.compile(r"python[0-9.]*").fullmatch
    if is_python(os.path.basename(argv[0])):
        return argv[:1], argv[1:]
    if os.path.basename(argv[0]) == "env" and len(argv) > 1 and is_python(argv[1]):
        return argv[:2], argv[2:]  # a `#!/usr/bin/env python3` script
    return None, argv


_ROOT_CAUSE = re.compile(
    r"Root Cause \(first observed failure\):.*?rank\s*:\s*(\d+) \(local_rank: (\d+)\)"
    r".*?exitcode\s*:\s*(-?\d+)",
    re.DOTALL,
)


def rank_failure(log_tail: str) -> str | None:
    """The reason for a failed torchrun job, from torchrun's failure summary, if it printed one."""
    summaries = list(_ROOT_CAUSE.finditer(log_tail))
    if not summaries:
        return None
    found = summaries[-1]  # the last run's: the log holds every run of a requeued job
    rank, local_rank, code = found.groups()
    how = f"was killed by signal {-int(code)}" if int(code) < 0 else f"exited with code {code}"
    return (
        f"RankFailed: rank {rank} (local rank {local_rank}) {how}; torchrun stopped the other ranks"
    )
