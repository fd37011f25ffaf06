"""`srun` inside a job (gpuyard's shim): a real server runs scripts that end in `srun ...`
with `--ntasks-per-node 3`; each task has its own SLURM_PROCID/SLURM_LOCALID, their output is
the job's log, a failing task fails the job (and stops its step's other tasks). On a root
server a job run as its owner runs the same shim (it needs nothing of gpuyard's virtualenv)."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuyard.adapters.identity import unix_identity
from gpuyard.services.launch.run_as import RunAsPolicy
from tests.e2e.executor_rig import Rig
from tests.e2e.server import ServerProcess, wait_ended, wait_for
from tests.e2e.unix_users import UnixUsers

RANKS = (
    "srun python3 -c 'import os; e = os.environ; "
    'print("task", e["SLURM_PROCID"], e["SLURM_LOCALID"], e["SLURM_NTASKS"], '
    'e["SLURM_STEP_ID"], e["SLURM_JOB_ID"])\'\n'
)


def submit_script(server: ServerProcess, text: str, tmp_path: Path, **fields: object) -> int:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n" + text)
    script.chmod(0o755)
    with server.client() as client:
        job = client.submit([str(script)], script=script.read_text(), workdir=str(tmp_path),
                            **fields)  # fmt: skip
    return int(job["id"])


def log_of(server: ServerProcess, job_id: int) -> list[str]:
    return (server.state_dir / "jobs" / str(job_id) / "output.log").read_text().splitlines()


def test_srun_starts_three_tasks_each_with_its_rank(server: ServerProcess, tmp_path: Path):
    job_id = submit_script(server, RANKS + RANKS, tmp_path, ntasks_per_node=3)
    with server.client() as client:
        ended = wait_ended(client, job_id)
    assert (ended["state"], ended["exit_code"]) == ("COMPLETED", 0)
    tasks = sorted(line for line in log_of(server, job_id) if line.startswith("task "))
    assert tasks == [f"task {r} {r} 3 {step} {job_id}" for r in range(3) for step in (0, 1)]


def test_a_failing_task_fails_the_job_and_stops_the_others(server: ServerProcess, tmp_path: Path):
    body = "srun sh -c '[ \"$SLURM_PROCID\" = 1 ] && exit 7; sleep 60'\necho not-reached\n"
    job_id = submit_script(server, "set -e\n" + body, tmp_path, ntasks_per_node=3)
    with server.client() as client:
        ended = wait_ended(client, job_id, timeout_s=40)  # the sleeping tasks were stopped
    assert (ended["state"], ended["exit_code"]) == ("FAILED", 7)
    log = "\n".join(log_of(server, job_id))
    assert "task 1: Exited with exit code 7" in log and "not-reached" not in log


def test_labelled_output_and_the_job_when_a_task_is_allowed_to_fail(
    server: ServerProcess, tmp_path: Path
):
    """`-l`: every line starts with its task's rank; `-K0`: the others run to their end, and
    srun still exits with the worst task's code."""
    body = (
        "srun -l --cpu-bind=none --mpi=pmix -u echo hello\n"
        "srun -K0 sh -c '[ \"$SLURM_PROCID\" = 2 ] && exit 3; echo done $SLURM_PROCID'\n"
        'echo "srun said $?"\n'
    )
    job_id = submit_script(server, body, tmp_path, ntasks_per_node=3)
    with server.client() as client:
        assert wait_ended(client, job_id)["state"] == "COMPLETED"
    lines = log_of(server, job_id)
    assert sorted(line for line in lines if line.endswith("hello")) == [
        "0: hello", "1: hello", "2: hello",
    ]  # fmt: skip
    assert sorted(line for line in lines if line.startswith("done")) == ["done 0", "done 1"]
    assert "srun said 3" in lines
    assert not any("ignoring" in line for line in lines)  # known options: silently accepted


CHECKPOINTS = (
    "srun python3 -c '"
    "import os, signal, sys, time\n"
    'rank = os.environ["SLURM_PROCID"]\n'
    "def save(sig, frame):\n"
    "    time.sleep(0.2)\n"
    '    print("saved", rank, signal.Signals(sig).name)\n'
    "    sys.exit(0)\n"
    "signal.signal(signal.SIGTERM, save)\n"
    'print("ready", rank)\n'
    "time.sleep(120)\n"
    "'\n"
)


@pytest.fixture
def patient_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A server whose stops give the job 30 s before SIGKILL: a loaded machine never cuts a
    handler short."""
    srv = ServerProcess(tmp_path / "state", "--gpus", "4", "--cpus", "32", "--kill-grace", "30")
    srv.start()
    yield srv
    srv.stop()
    srv.kill_jobs()


def test_a_cancelled_steps_tasks_save_their_checkpoints_into_the_log(
    patient_server: ServerProcess, tmp_path: Path
):
    """Cancel (or preemption): every task gets the stop signal, and what its handler prints
    while it saves reaches the log (srun and its line readers outlive the signal, srun waits
    for its tasks) in a script that outlives it too (gpuyard ends what a script leaves behind
    when it ends)."""
    script = "trap 'echo batch: stop' TERM\n" + CHECKPOINTS + 'echo "srun: $?"\n'
    job_id = submit_script(patient_server, script, tmp_path, ntasks_per_node=2)
    with patient_server.client() as client:
        log = patient_server.state_dir / "jobs" / str(job_id) / "output.log"
        wait_for(lambda: log.exists() and log.read_text().count("ready ") == 2)
        client.cancel(job_id)
        assert wait_ended(client, job_id)["state"] == "CANCELLED"
    saved = sorted(line for line in log_of(patient_server, job_id) if line.startswith("saved"))
    assert saved == ["saved 0 SIGTERM", "saved 1 SIGTERM"]
    assert log_of(patient_server, job_id)[-2:] == ["batch: stop", "srun: 0"]


def test_srun_is_on_a_scripts_path_and_not_on_a_plain_commands(
    server: ServerProcess, tmp_path: Path
):
    """Jobs submitted as a script get gpuyard's srun (and `scontrol show hostnames`, which
    scripts use to find their first node), readable by any user; a plain `python train.py`
    does not (Lightning would warn it that srun is there, unused)."""
    body = 'command -v srun\nscontrol show hostnames "$SLURM_JOB_NODELIST"\n'
    job_id = submit_script(server, body, tmp_path)
    with server.client() as client:
        assert wait_ended(client, job_id)["state"] == "COMPLETED"
        plain = client.submit(["sh", "-c", "command -v srun || echo no-srun"])
        assert wait_ended(client, plain["id"])["state"] == "COMPLETED"
    *_, where, hostname = log_of(server, job_id)
    shim = Path(where)
    assert shim.name == "srun" and stat.S_IMODE(shim.stat().st_mode) == 0o755
    assert stat.S_IMODE(shim.parent.stat().st_mode) == 0o755
    assert hostname == socket.gethostname()  # the job's node list: this machine
    # Not gpuyard's: none, or a real Slurm's where one is installed (a lab mid-migration).
    found = log_of(server, plain["id"])[-1]
    assert found == "no-srun" or Path(found).parent != shim.parent, found


LIGHTNING = """
import warnings
warnings.simplefilter("ignore")
import pytorch_lightning as pl
trainer = pl.Trainer(accelerator="cpu", devices=2, logger=False, enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False)
env = trainer.strategy.cluster_environment
print("lightning", type(env).__name__, trainer.global_rank, trainer.local_rank,
      trainer.world_size, env.main_address, flush=True)
"""


def test_a_lightning_script_launched_with_srun_gets_one_rank_per_task(
    server: ServerProcess, tmp_path: Path
):
    """The many sbatch scripts that end in `srun python train.py` with --ntasks-per-node 2:
    Lightning (for real) is SLURMEnvironment in each task, ranks 0 and 1 of 2, on this
    machine."""
    pytest.importorskip("pytorch_lightning")  # the `test` extra installs it
    (tmp_path / "train.py").write_text(LIGHTNING)
    job_id = submit_script(server, f"srun {sys.executable} train.py\n", tmp_path,
                           ntasks_per_node=2)  # fmt: skip
    with server.client() as client:
        ended = wait_ended(client, job_id, timeout_s=120)
    log = log_of(server, job_id)
    assert ended["state"] == "COMPLETED", log[-20:]
    ranks = sorted(line.split()[1:] for line in log if line.startswith("lightning "))
    assert ranks == [
        ["SLURMEnvironment", "0", "0", "2", "127.0.0.1"],
        ["SLURMEnvironment", "1", "1", "2", "127.0.0.1"],
    ]


def test_a_job_run_as_its_owner_runs_srun(users: UnixUsers):
    """A root server: the job is alice's, the shim the server's (0755 in the 0711 jobs
    folder): she runs it, with nothing of the server's virtualenv."""
    state = Path(tempfile.mkdtemp(prefix="gpuyard-srun-", dir="/tmp"))
    state.chmod(0o711)
    rig = Rig(state)
    try:
        alice = RunAsPolicy(unix_identity, 0, "root").for_owner(users.alice)
        script = "srun sh -c 'echo \"$(id -un) $SLURM_PROCID\"'"
        rig.start(1, script, run_as=alice, workdir=Path("/"), ntasks_per_node=2)
        assert rig.wait_end(1).exit_code == 0
        lines = sorted(rig.log(1).splitlines())
        assert lines == [f"{users.alice} 0", f"{users.alice} 1"]
    finally:
        rig.executor.close()
        shutil.rmtree(state, ignore_errors=True)


NO_CONFIG = "Could not establish a configuration source"


def test_a_slurm_client_on_the_machine_does_not_shadow_gpuyards_srun(tmp_path: Path):
    """A machine that also has a real Slurm client (a lab mid-migration), on the server's PATH
    and on the submitter's: a job's `srun` and `scontrol` are still gpuyard's (Slurm's would
    say "Could not establish a configuration source": a gpuyard job is no allocation)."""
    slurm = tmp_path / "slurm-bin"
    slurm.mkdir()
    for name in ("srun", "scontrol"):
        fake = slurm / name
        fake.write_text(f"#!/bin/sh\necho '{name}: error: {NO_CONFIG}' >&2\nexit 1\n")
        fake.chmod(0o755)
    path = f"{slurm}:{os.environ.get('PATH', '')}"
    from tests.e2e.conftest import SERVER_ARGS

    server = ServerProcess(tmp_path / "state", *SERVER_ARGS, env={**os.environ, "PATH": path})
    server.start()
    try:
        body = RANKS + 'scontrol show hostnames "$SLURM_JOB_NODELIST"\n'
        job_id = submit_script(server, body, tmp_path, ntasks_per_node=2, env={"PATH": path})
        with server.client() as client:
            ended = wait_ended(client, job_id)
        log = log_of(server, job_id)
        assert (ended["state"], ended["exit_code"]) == ("COMPLETED", 0), log
        assert sorted(line for line in log if line.startswith("task ")) == [
            f"task {r} {r} 2 0 {job_id}" for r in range(2)
        ]
        assert log[-1] == socket.gethostname()
    finally:
        server.stop()
        server.kill_jobs()
