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

The job's own environment (`--venv`, `--python`, `--container`) is one more recipe here
(`job_environment`, `container_argv`): checked at launch as the job's user (`check_interpreter`),
and a container's runtime found where the server runs (`Inventory.container_runtime`).
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Mapping, Sequence
from functools import partial

from gpuyard.domain.errors import InvalidRequest
from gpuyard.domain.job import Gpu, Job, JobSpec
from gpuyard.jobhooks import HOOK_DIR
from gpuyard.services.launch.env import build_job_env, has_batch_tasks, wants_slurm_env
from gpuyard.services.ports import ContainerRuntime, LaunchPlan, RunAs

LOCALHOST = "127.0.0.1"


def launch_plan(
    job: Job,
    base_env: Mapping[str, str],
    gpu_total_mib: int | None,
    port: int | None,
    log_path: str,
    run_as: RunAs | None = None,
    container: ContainerRuntime | None = None,
    gpus: Sequence[Gpu] = (),
) -> LaunchPlan:
    """The whole recipe an executor carries out for `job`: the one-machine command and
    environment (`build_job_env` + `job_process`), and `argv_for`, the command of each node
    when a backend spreads the job over machines (`node_argv`), so no adapter rebuilds it.
    `container`: the server's container runtime (a `--container` job needs one); `gpus`: the
    server's GPUs (each vendor's device mask, `job_env.visible_devices`). Raises
    ValueError (the job fails LaunchFailed with its one line) when the job's `--python` or
    `--venv` cannot be run by the job's user."""
    checkpoints = checkpoint_dir(log_path)
    progress = progress_file(log_path)
    env = build_job_env(
        job, base_env, gpu_total_mib, run_as, checkpoints, progress, gpus=gpus,
        python_hook=hook_readable(run_as),
    )  # fmt: skip
    check_interpreter(job.spec, run_as)
    env = job_environment(job.spec, env)
    script = script_copy(job, log_path)
    argv, env = job_process(job, env, port, script[0] if script else None)
    if job.spec.container is not None:
        if container is None:
            raise ValueError(container_refusal(job.spec))
        uid = run_as.uid if run_as is not None else os.geteuid()
        # The job's folder too: its script copy, checkpoint folder and progress file.
        jobdir = os.path.dirname(log_path)
        argv, env = container_argv(
            container, job.spec.container, argv, env, job.spec.workdir, job.gpus, uid, (jobdir,),
            amd=_on_amd(job, gpus),
        )  # fmt: skip
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
        warn_target=job.spec.warn_target,
        checkpoint_dir=checkpoints,
        progress_file=progress,
        srun_shim=wants_srun(job),
    )


def needs_port(spec: JobSpec) -> bool:
    """Whether the job gets a rendezvous port of its own: a `--distributed` job, and a job of
    several tasks (their MASTER_PORT: `srun`'s tasks find each other there)."""
    return spec.distributed is not None or spec.ntasks_per_node > 1


def wants_srun(job: Job) -> bool:
    """Whether gpuyard's `srun` goes on the job's PATH: a job submitted as a script (sbatch's
    way), one of several tasks, or one whose command is `srun`. Not every job: Lightning warns
    a job that has an `srun` on its PATH and does not use it (a plain `python train.py`)."""
    if not wants_slurm_env(job):
        return False
    spec = job.spec
    return (
        spec.script is not None
        or spec.ntasks_per_node > 1
        or os.path.basename(spec.argv[0]) == "srun"
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
    argv = _with_python(job.spec, list(job.spec.argv))
    if script_path is not None:
        argv[job.spec.script_index] = script_path
    mode = job.spec.distributed
    if mode is None:
        if port is not None:  # several tasks (`srun`): where rank 0 listens, unless set
            env = {"MASTER_ADDR": LOCALHOST, "MASTER_PORT": str(port), **env}
        return argv, env
    assert port is not None, "a distributed job needs a rendezvous port"
    env = {**env, "GPUYARD_DISTRIBUTED": mode}
    if mode == "torchrun":
        return _torchrun(argv, len(job.gpus), port, python=job.spec.python), env
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
    argv = _with_python(job.spec, list(job.spec.argv))
    mode = job.spec.distributed
    slurm = _node_slurm(job, node_rank)
    if mode == "torchrun":
        # Each rank's lines labelled with its global rank (`[rank2] ...`; the server labels
        # them with the node too): torchrun tees every worker's output through one reader,
        # so lines of different ranks never interleave.
        label = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=[rank${rank}] "
        torchrun = _torchrun(
            argv, job.spec.gpus_per_node, master_port, job.spec.nodes, node_rank, master_addr,
            tee=True, python=job.spec.python,
        )  # fmt: skip
        return ["env", label, *slurm, *torchrun]
    assigned = [f"MASTER_ADDR={master_addr}", f"MASTER_PORT={master_port}", *slurm]
    if mode == "jax":
        assigned += [
            f"GPUYARD_DISTRIBUTED={mode}",
            f"JAX_COORDINATOR_ADDRESS={master_addr}:{master_port}",
            f"JAX_NUM_PROCESSES={job.spec.nodes}",
            f"JAX_PROCESS_ID={node_rank}",
        ]
    return ["env", *assigned, *argv]


def _node_slurm(job: Job, node_rank: int) -> list[str]:
    """Node `node_rank`'s own Slurm variables (`env K=V` words): its SLURM_NODEID and name, and
    its first task's id (a job without tasks: one a node, as `srun --ntasks-per-node=1`)."""
    if not wants_slurm_env(job):
        return []
    names = job.node.split(",")
    words = [f"SLURM_NODEID={node_rank}"]
    if node_rank < len(names):
        words.append(f"SLURMD_NODENAME={names[node_rank]}")
    per_node = job.spec.ntasks_per_node if has_batch_tasks(job) else 1
    words.append(f"SLURM_PROCID={node_rank * per_node}")
    return words


def _torchrun(
    argv: list[str],
    nproc: int,
    port: int,
    nnodes: int = 1,
    node_rank: int = 0,
    master: str = LOCALHOST,
    tee: bool = False,
    python: str | None = None,
) -> list[str]:
    options = [
        f"--nnodes={nnodes}", f"--nproc-per-node={nproc}", f"--node-rank={node_rank}",
        f"--master-addr={master}", f"--master-port={port}", "--max-restarts=0",
        *(["--tee=3"] if tee else []),
    ]  # fmt: skip
    interpreter, rest = _python_of(argv)
    if interpreter is None:
        if python is not None:  # `--python`: its torchrun, whatever PATH holds
            return [python, "-m", "torch.distributed.run", *options, *argv]
        return ["torchrun", *options, *argv]
    # `python [flags] train.py` (what a submitted script becomes): that python runs torchrun,
    # its flags stay with it.
    flags = []
    while rest and rest[0].startswith("-") and rest[0] not in ("-m", "-c"):
        flags.append(rest.pop(0))
        if flags[-1] in ("-X", "-W") and rest:  # options that take a value
            flags.append(rest.pop(0))
    return [*interpreter, *flags, "-m", "torch.distributed.run", *options, *rest]


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


# -- the job's own environment: --venv, --python, --container -----------------------------
_PYTHON_NAME = re.compile(r"python[0-9.]*").fullmatch
# What a container does not take from the job's environment: the host's program and library
# paths and interpreter settings mean nothing inside an image (its own PATH stays).
_HOST_ONLY = frozenset(
    {"PATH", "LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONHOME", "PYTHONPATH", "VIRTUAL_ENV", "HOME"}
)


def _with_python(spec: JobSpec, argv: list[str]) -> list[str]:
    """`--python PATH`: a bare `python`/`python3`/`python3.11` argv[0] (looked up on PATH)
    becomes PATH; a path (`/usr/bin/python3`) is the user's explicit choice and stays."""
    if spec.python is not None and argv and "/" not in argv[0] and _PYTHON_NAME(argv[0]):
        argv[0] = spec.python
    return argv


def job_environment(spec: JobSpec, env: Mapping[str, str]) -> dict[str, str]:
    """The job's environment with its `--venv` or `--python`: VENV/bin (or the interpreter's
    folder) first on PATH, VIRTUAL_ENV the venv (dropped for an interpreter outside the one
    the submitter's shell had), PYTHONHOME never (it would point the interpreter at another
    standard library)."""
    out = dict(env)
    path = out.get("PATH", "")
    if spec.venv is not None:
        venv = spec.venv.rstrip("/") or "/"
        out["PATH"] = f"{venv}/bin" + (f":{path}" if path else "")
        out["VIRTUAL_ENV"] = venv
        out.pop("PYTHONHOME", None)
    elif spec.python is not None:
        folder = os.path.dirname(spec.python)
        out["PATH"] = folder + (f":{path}" if path else "")
        out.pop("PYTHONHOME", None)
        active = out.get("VIRTUAL_ENV")
        if active and not spec.python.startswith(active.rstrip("/") + "/"):
            out.pop("VIRTUAL_ENV")
    return out


def check_interpreter(spec: JobSpec, run_as: RunAs | None) -> None:
    """`--python`/`--venv` at launch: the interpreter must exist and be executable by the
    job's user (every folder on its way, the link's target's too); raises ValueError, one
    line, else."""
    if spec.python is not None:
        what, path = f"--python {spec.python}", spec.python
    elif spec.venv is not None:
        what, path = f"--venv {spec.venv}", os.path.join(spec.venv, "bin", "python")
    else:
        return
    who = run_as.user if run_as is not None else "the server's user"
    why = _not_executable(path, run_as)
    if why is not None:
        fix = "make one with `python3 -m venv PATH`" if spec.venv else "give an interpreter's path"
        raise ValueError(f"{what}: {why} for {who}; {fix} the job's user can run")


def _not_executable(path: str, run_as: RunAs | None) -> str | None:
    """Why `path` cannot be executed by `run_as` (None: it can)."""
    try:
        target = os.stat(path)
    except FileNotFoundError:
        return f"{path} does not exist"
    except OSError as exc:
        return f"{path} cannot be read ({exc.strerror})"
    if not stat.S_ISREG(target.st_mode):
        return f"{path} is not a file"
    if run_as is None:
        return None if os.access(path, os.X_OK) else f"{path} is not executable"
    groups = {run_as.gid, *run_as.groups}
    real = os.path.realpath(path)
    for folder in dict.fromkeys([*_folders_of(path), *_folders_of(real)]):
        try:
            info = os.stat(folder)
        except OSError:
            return f"{folder} cannot be reached"
        if not _permits(info, run_as.uid, groups, 0o1, folder=True):
            return f"{folder} cannot be entered"
    if not _permits(target, run_as.uid, groups, 0o1, folder=False):
        return f"{path} is not executable"
    return None


def hook_readable(run_as: RunAs | None) -> bool:
    """Whether `run_as` can load gpuyard's Python startup hook (`jobhooks`): on a root server
    gpuyard's own virtualenv may sit where a job's user cannot reach (root's home)."""
    if run_as is None or run_as.uid == 0:
        return True
    groups = {run_as.gid, *run_as.groups}
    hook = os.path.join(HOOK_DIR, "sitecustomize.py")
    try:
        folders = [os.stat(folder) for folder in _folders_of(hook)]
        readable = _permits(os.stat(hook), run_as.uid, groups, 0o4, folder=False)
    except OSError:
        return False
    return readable and all(_permits(f, run_as.uid, groups, 0o1, folder=True) for f in folders)


def _folders_of(path: str) -> list[str]:
    folders = []
    folder = os.path.dirname(os.path.abspath(path))
    while True:
        folders.append(folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            return folders[::-1]
        folder = parent


def _permits(info: os.stat_result, uid: int, groups: set[int], bit: int, folder: bool) -> bool:
    """Unix permission `bit` (1 x, 4 r) for `uid` in `groups` on a file of `info`."""
    if uid == 0:  # root: any folder; a file with any x bit
        return folder or bool(info.st_mode & 0o111)
    if info.st_uid == uid:
        shift = 6
    elif info.st_gid in groups:
        shift = 3
    else:
        shift = 0
    return bool(info.st_mode & (bit << shift))


def check_container(spec: JobSpec, runtime: ContainerRuntime | None) -> None:
    """At submit: a `--container` job needs a runtime on this server, and one machine."""
    if runtime is None:
        raise InvalidRequest(container_refusal(spec), field="container")
    if spec.nodes > 1:
        raise InvalidRequest(
            "--container runs on one machine: submit it without --nodes, or run the "
            "container's runtime yourself in the job's command",
            field="container",
        )


def container_refusal(spec: JobSpec) -> str:
    """The one line a `--container` job gets on a server with no container runtime."""
    return (
        f"--container {spec.container}: this server has neither apptainer (or singularity) "
        "nor podman on its PATH; ask its admin to install apptainer or podman, or run the job "
        "with --venv, or start the container's runtime yourself in the job's command"
    )


def container_argv(
    runtime: ContainerRuntime,
    image: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    workdir: str,
    gpus: Sequence[int],
    uid: int,
    binds: Sequence[str] = (),
    amd: bool = False,
) -> tuple[list[str], dict[str, str]]:
    """The command and environment that run `argv` in `image` (docs/cli.md, "Containers");
    `binds`: more folders seen at their own paths (the job's folder); `amd`: the job's GPUs
    are AMD ones (apptainer `--rocm`; podman `/dev/kfd` and `/dev/dri`, all of them, so that
    ROCR_VISIBLE_DEVICES names the same GPUs inside as outside: the job's cgroup still denies
    the others' render nodes, podman making none of its own).

    apptainer/singularity: `exec --nv --cleanenv --bind WORKDIR --pwd WORKDIR IMAGE argv`;
    the job's variables (but the host's paths, `_HOST_ONLY`) go in as APPTAINERENV_K (what
    --cleanenv lets through), CUDA_VISIBLE_DEVICES among them: with --nv the container sees
    the job's GPUs only. podman: `run --rm` with each GPU by CDI (`--device
    nvidia.com/gpu=N`), the host's network and IPC (a normal job's: rendezvous ports, NCCL's
    shared memory), the workdir mounted at its own path, the variables by name (`--env K`:
    podman reads each value from its environment, so no value shows in `ps`),
    `--userns=keep-id` for a user's job (files it writes are the user's), and
    `--cgroups=disabled`: podman makes no cgroup of its own, so the container's processes
    stay in the job's (its --mem, --cpus, pids) and the supervisor stops them with the job."""
    names = sorted(k for k in env if k not in _HOST_ONLY and _ENV_NAME(k))
    out = dict(env)
    if runtime.kind in ("apptainer", "singularity"):
        prefix = "APPTAINERENV_" if runtime.kind == "apptainer" else "SINGULARITYENV_"
        for name in names:
            out[prefix + name] = env[name]
        options = (["--rocm"] if amd else ["--nv"]) if gpus else []
        options += ["--cleanenv", "--bind", ",".join([workdir, *binds]), "--pwd", workdir]
        return [runtime.path, "exec", *options, image, *argv], out
    devices = [f"--device=nvidia.com/gpu={i}" for i in gpus]
    if amd and gpus:
        devices = ["--device=/dev/kfd", "--device=/dev/dri"]
    userns = ["--userns=keep-id"] if uid != 0 else []
    options = [
        "--rm", "--cgroups=disabled", "--network=host", "--ipc=host", *userns, *devices,
        *(f"--volume={path}:{path}" for path in (workdir, *binds)), f"--workdir={workdir}",
        *(f"--env={name}" for name in names),
    ]  # fmt: skip
    return [runtime.path, "run", *options, image, *argv], out


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*").fullmatch


def _on_amd(job: Job, gpus: Sequence[Gpu]) -> bool:
    """Whether the job's GPUs are AMD ones (the server's `gpus` say)."""
    vendors = {gpu.index: gpu.vendor for gpu in gpus}
    return bool(job.gpus) and all(vendors.get(i) == "amd" for i in job.gpus)
