"""Checkpoint and resume end to end (issue 12): every job's GPUYARD_CHECKPOINT_DIR is one folder
kept across its runs, so `examples/train_mlp.py`, preempted by a higher-priority job or retried
after a crash (`--retries`), goes on from the step it saved, not from zero; `--signal
SIG@SECONDS` (warn_signal, warn_before_s) reaches the job that long before its time limit, also
when the server was killed and restarted meanwhile (the supervisor keeps the time); the folder
is the job's user's own."""

from __future__ import annotations

import os
import pwd
import re
import shutil
import stat
import sys
import tempfile
from pathlib import Path

from gpuyard.adapters.identity import unix_identity
from gpuyard.services.launch.run_as import RunAsPolicy
from tests.e2e.executor_rig import Rig
from tests.e2e.server import ServerProcess, wait_ended, wait_for
from tests.e2e.unix_users import UnixUsers

REPO = Path(__file__).resolve().parents[2]
TRAIN = [sys.executable, str(REPO / "examples" / "train_mlp.py")]
SAVED = re.compile(r"^checkpoint saved at step (\d+) \((.*)\)$", re.MULTILINE)
RESUMED = re.compile(r"^resumed from step (\d+)$", re.MULTILINE)


def test_a_preempted_training_job_resumes_from_its_last_checkpoint(
    server: ServerProcess,
) -> None:
    client = server.client()
    submitted = server.cli(
        "submit", "--preemptible", "--gpus", "4", "--name", "mlp", "--workdir", str(REPO),
        "--", *TRAIN, "--steps", "200", "--step-delay", "0.02", "--checkpoint-every", "20",
        "--log-every", "20", "--hidden", "32",
    )  # fmt: skip
    victim = int(submitted.stdout)
    log = Path(client.job(victim)["log_path"])
    wait_for(lambda: log.exists() and SAVED.search(log.read_text()), timeout_s=120)
    urgent = int(server.cli("submit", "--gpus", "2", "--priority", "10", "--", "true").stdout)
    wait_for(lambda: client.job(victim)["restarts"] == 1, timeout_s=60)
    assert wait_for(lambda: client.job(urgent)["state"] == "COMPLETED", timeout_s=60)
    done = wait_for(
        lambda: (j := client.job(victim))["state"] in ("COMPLETED", "FAILED") and j, timeout_s=180
    )
    text = log.read_text()
    assert done["state"] == "COMPLETED", text[-3000:]
    first_run, _, second_run = text.partition("resumed from step")
    saves = SAVED.findall(first_run)
    # The stop signal made it save where it was, after the periodic saves.
    assert saves[-1][1] == "SIGTERM: stopping", first_run[-2000:]
    last_saved = int(saves[-1][0])
    assert RESUMED.findall(text) == [str(last_saved)], "one resume, from the last save"
    assert 0 < last_saved < 200
    # The second run went on from there: its first step printed is past the save, none before.
    steps = [int(s) for s in re.findall(r"^step (\d+)/200", second_run, re.MULTILINE)]
    assert steps and steps[0] > last_saved and steps[-1] == 200
    assert "done: final loss" in second_run
    checkpoint = Path(log.parent, "checkpoint", "train_mlp.pt")
    assert checkpoint.is_file()


# First run: train, and crash (SIGKILL, as an OOM kill or a segfault would) once a checkpoint
# is saved; the retry runs the same training, which loads it.
CRASHES_ONCE = """\
if [ "$GPUYARD_RESTART_COUNT" != 0 ]; then exec "$@"; fi
"$@" & pid=$!
until [ -e "$GPUYARD_CHECKPOINT_DIR/train_mlp.pt" ]; do sleep 0.05; done
kill -9 $pid
exit 1
"""


def test_a_retried_training_job_resumes_from_the_checkpoint_its_failed_run_saved(
    tmp_path: Path,
) -> None:
    env = dict(os.environ, GPUYARD_RETRY_BACKOFF_S="0.2")
    server = ServerProcess(tmp_path / "state", "--gpus", "1", "--cpus", "4", env=env).start()
    try:
        script = tmp_path / "crashes_once.sh"
        script.write_text(CRASHES_ONCE)
        submitted = server.cli(
            "submit", "--retries", "1", "--workdir", str(REPO), "--", "sh", str(script), *TRAIN,
            "--steps", "120", "--step-delay", "0.02", "--checkpoint-every", "20",
            "--log-every", "20", "--hidden", "32",
        )  # fmt: skip
        job_id = int(submitted.stdout)
        client = server.client()
        done = wait_for(
            lambda: (j := client.job(job_id))["state"] not in ("PENDING", "RUNNING") and j, 180
        )
        text = Path(done["log_path"]).read_text()
        assert done["state"] == "COMPLETED", text[-3000:]
        assert [a["state"] for a in done["attempts"]] == ["FAILED"]
        first_run, _, second_run = text.partition("resumed from step")
        last_saved = int(SAVED.findall(first_run)[-1][0])
        assert RESUMED.findall(text) == [str(last_saved)] and last_saved > 0
        steps = [int(s) for s in re.findall(r"^step (\d+)/120", second_run, re.MULTILINE)]
        assert steps and steps[0] > last_saved and steps[-1] == 120
    finally:
        server.stop()
        server.kill_jobs()


WARNED = """\
up() { cut -d' ' -f1 /proc/uptime; }
echo "start $(up)" >> "$OUT"
trap 'echo "usr1 $(up)" >> "$OUT"' USR1
trap 'echo "term $(up)" >> "$OUT"; exit 0' TERM
while :; do sleep 0.1; done
"""


def test_the_warning_signal_comes_that_long_before_the_limit_across_a_server_restart(
    server: ServerProcess, tmp_path: Path
) -> None:
    """USR1 4 s before a 7 s limit, then the stop signal at the limit; the server is killed
    and restarted in between, the supervisor keeps the time. Times are what the job records
    on the boot-time clock (/proc/uptime), with slack of whole seconds either way."""
    out = tmp_path / "times"
    script = tmp_path / "warned.sh"
    script.write_text(WARNED)
    client = server.client()
    job = client.submit(
        ["sh", str(script)], time_limit="7s", warn_signal="USR1", warn_before_s=4,
        env={"OUT": str(out)},
    )  # fmt: skip
    assert (job["warn_signal"], job["warn_before_s"]) == (10, 4)
    wait_for(lambda: out.exists())
    server.kill9()
    server.start()
    client = server.client()
    ended = wait_ended(client, job["id"], 30)
    assert ended["state"] == "TIMEOUT"
    times = dict(line.split() for line in out.read_text().splitlines())
    assert list(times) == ["start", "usr1", "term"], out.read_text()  # USR1 once, then TERM
    start, usr1, term = (float(times[k]) for k in ("start", "usr1", "term"))
    assert 1.5 <= usr1 - start <= 5, times  # due 3 s after the start
    assert 3 <= term - usr1 <= 6, times  # due 4 s before the limit


def test_the_checkpoint_folder_is_the_jobs_users_own_and_outlives_its_run(
    users: UnixUsers,
) -> None:
    """Run twice as alice (a requeue's second run): the folder is hers, 0700, the same path,
    and holds what the first run saved."""
    state = Path(tempfile.mkdtemp(prefix="gpuyard-ckpt-", dir="/tmp"))
    state.chmod(0o711)  # a root server's state dir: crossable, not listable
    rig = Rig(state)
    alice = RunAsPolicy(unix_identity, 0, "root").for_owner(users.alice)
    script = (
        'echo "dir $GPUYARD_CHECKPOINT_DIR"; cat "$GPUYARD_CHECKPOINT_DIR/step" 2>/dev/null '
        '|| echo none; echo 42 > "$GPUYARD_CHECKPOINT_DIR/step"'
    )
    try:
        rig.start(7, script, run_as=alice, workdir=Path("/"))
        assert rig.wait_end(7).exit_code == 0
        rig.ended.clear()
        rig.start(7, script, run_as=alice, workdir=Path("/"))
        assert rig.wait_end(7).exit_code == 0
        folder = rig.executor.job_dir(7) / "checkpoint"
        assert rig.log(7).splitlines() == [f"dir {folder}", "none", f"dir {folder}", "42"]
        info = os.stat(folder)
        owner = pwd.getpwuid(info.st_uid).pw_name
        assert (owner, stat.S_IMODE(info.st_mode)) == (users.alice, 0o700)
    finally:
        rig.executor.close()
        shutil.rmtree(state, ignore_errors=True)
