"""A job cannot fool or escape its supervisor: what it writes is not trusted, killing or
stopping its supervisor does not free its GPUs while it runs, and nothing it sends in its
environment loads into the supervisor. Real processes, through `LocalExecutor` directly (a
tmp dir, no server) and through a real server for the restart the defect broke."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuyard.services.ports import RunAs
from tests.e2e.executor_rig import GRACE_S, Rig
from tests.e2e.server import ServerProcess, pid_alive, wait_ended, wait_for

FORGED = '{"exit_code": 0, "signal": null, "timed_out": false, "ended_at": 0}'


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    r = Rig(tmp_path)
    yield r
    r.executor.close()


def _pids(path: Path) -> list[int]:
    return [int(p) for p in path.read_text().split()] if path.exists() else []


# Leaves a tree behind: a background sleep, one that escaped into its own session, pids noted.
TREE = 'sleep 300 & echo $! >> "$PIDS"; setsid sleep 300 & echo $! >> "$PIDS"; '


def test_a_job_that_forges_its_status_and_kills_its_supervisor_is_lost_and_ended(rig: Rig):
    pids = rig.tmp / "pids"
    script = f"{TREE} printf '%s' '{FORGED}' > \"$JOBDIR/status.json\"; kill -9 $PPID; wait"
    job = rig.start(1, script, env={"PIDS": str(pids)})
    wait_for(lambda: len(_pids(pids)) == 2)
    status = rig.wait_end(1)
    assert status.lost and status.exit_code is None, "the forged status was believed"
    # Ended before the end was reported: its GPUs are free only once it is gone.
    assert not [p for p in _pids(pids) if pid_alive(p)], "the job outlived its supervisor"
    assert not pid_alive(job.pid or 0)


def test_a_stopped_supervisor_cannot_defeat_the_time_limit(rig: Rig):
    pidfile = rig.tmp / "pid"
    began = time.monotonic()
    rig.start(2, f"echo $$ > {pidfile}; kill -STOP $PPID; exec sleep 300", limit_s=1)
    status = rig.wait_end(2)
    assert status.timed_out
    # Limit 1 s + grace 0.5 s + the executor's margin 1 s; the processes are ended on top.
    assert time.monotonic() - began < 1 + GRACE_S + 1 + GRACE_S + 3
    assert not pid_alive(int(pidfile.read_text()))


def test_a_supervisor_kept_stopped_by_its_job_cannot_defeat_cancel(rig: Rig):
    pidfile = rig.tmp / "pid"
    script = f"trap '' TERM; echo $$ > {pidfile}; while :; do kill -STOP $PPID; sleep 0.02; done"
    job = rig.start(3, script)
    wait_for(pidfile.exists)
    time.sleep(0.1)
    asked = time.monotonic()
    rig.executor.stop(job)
    status = rig.wait_end(3)
    assert status.stop_requested and not status.lost
    assert rig.ended_when[3] - asked < GRACE_S + 1 + GRACE_S + 3
    assert not pid_alive(int(pidfile.read_text()))


def test_a_stopped_supervisor_still_hears_cancel(rig: Rig):
    """SIGCONT comes with the SIGTERM: a supervisor stopped once acts on it at once."""
    pidfile = rig.tmp / "pid"
    job = rig.start(4, f"echo $$ > {pidfile}; kill -STOP $PPID; exec sleep 300")
    wait_for(pidfile.exists)
    time.sleep(0.1)
    rig.executor.stop(job)
    status = rig.wait_end(4)
    assert status.stop_requested and status.signal == 15
    assert "stop requested" in rig.log(4)  # the supervisor itself stopped the job


def test_after_a_restart_a_forged_status_with_the_job_still_running_is_lost(rig: Rig):
    pids = rig.tmp / "pids"
    go = rig.tmp / "go"
    script = (
        f"{TREE} while [ ! -e {go} ]; do sleep 0.02; done; "
        f"printf '%s' '{FORGED}' > \"$JOBDIR/status.json\"; kill -9 $PPID; wait"
    )
    job = rig.start(5, script, env={"PIDS": str(pids)})
    wait_for(lambda: len(_pids(pids)) == 2)
    rig.executor.close()  # the "server" goes down; its supervisors run on
    restarted = Rig(rig.tmp)
    try:
        go.touch()
        wait_for(lambda: not pid_alive(job.pid or 0))
        found = restarted.executor.recover(job)
        assert found.ended is not None and found.ended.lost
        assert not [p for p in _pids(pids) if pid_alive(p)]
    finally:
        restarted.executor.close()


def test_a_status_that_ends_before_the_start_is_clamped_to_the_start(rig: Rig):
    job = rig.start(6, f"printf '%s' '{FORGED}' > \"$JOBDIR/status.json\"; exit 0")
    status = rig.wait_end(6)
    # The supervisor wrote its own status over the forged one: the true end, after the start.
    assert status.exit_code == 0 and status.ended_at is not None
    assert job.started_at is not None and status.ended_at >= job.started_at
    # A forged file found at a restart (supervisor gone, nothing left running) is clamped.
    (rig.executor.job_dir(6) / "status.json").write_text(FORGED)
    found = rig.executor.recover(job)
    assert found.ended is not None and found.ended.ended_at == job.started_at
    garbage = json.dumps({"exit_code": "0", "signal": None, "timed_out": 0, "ended_at": "x"})
    (rig.executor.job_dir(6) / "status.json").write_text(garbage)
    found = rig.executor.recover(job)
    assert found.ended is not None and found.ended.lost


def test_what_a_job_writes_can_neither_exhaust_nor_misdirect_a_restart(rig: Rig):
    job = rig.start(12, "exit 0")
    assert rig.wait_end(12).exit_code == 0
    status = rig.executor.job_dir(12) / "status.json"
    for junk in ("[" * 100_000, " " * 50_000_000 + FORGED):  # too deep; too big to read
        status.write_text(junk)
        found = rig.executor.recover(job)
        assert found.ended is not None and found.ended.lost
    # A server that died before recording the pid finds it in supervisor.pid, which the job
    # can write: a pid that is not its supervisor's never names a session to end.
    bystander = subprocess.Popen(
        ["sh", "-c", "sleep 300 & echo $!; wait"], stdout=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        assert bystander.stdout is not None
        child = int(bystander.stdout.readline())
        status.unlink()
        (rig.executor.job_dir(12) / "supervisor.pid").write_text(str(bystander.pid))
        found = rig.executor.recover(job.with_changes(pid=None, pid_started_at=None))
        assert found.ended is not None and found.ended.lost
        assert pid_alive(child), "a process outside the job was ended"
    finally:
        os.killpg(bystander.pid, 9)
        bystander.wait()


@pytest.fixture(scope="module")
def preload_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A library that kills any supervisor it is loaded into (exit 99) and says so; in any
    other process it only says that it was loaded."""
    if shutil.which("gcc") is None:
        pytest.skip("no C compiler (gcc)")
    folder = tmp_path_factory.mktemp("preload")
    source = folder / "evil.c"
    source.write_text(
        "#include <stdio.h>\n#include <string.h>\n#include <unistd.h>\n"
        "__attribute__((constructor)) static void evil(void) {\n"
        '  char cmd[4096] = {0}; FILE *f = fopen("/proc/self/cmdline", "r");\n'
        "  size_t n = f ? fread(cmd, 1, sizeof cmd - 1, f) : 0; if (f) fclose(f);\n"
        "  for (size_t i = 0; i < n; i++) if (!cmd[i]) cmd[i] = ' ';\n"
        '  if (strstr(cmd, "supervisor")) { dprintf(2, "EVIL IN SUPERVISOR\\n"); _exit(99); }\n'
        '  dprintf(2, "evil loaded in the job\\n");\n}\n'
    )
    lib = folder / "evil.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(source)], check=True)
    return lib


def test_ld_preload_sent_with_a_job_never_loads_into_its_supervisor(rig: Rig, preload_lib: Path):
    rig.start(7, 'echo "job sees LD_PRELOAD=$LD_PRELOAD"', env={"LD_PRELOAD": str(preload_lib)})
    status = rig.wait_end(7)
    log = rig.log(7)
    assert "EVIL IN SUPERVISOR" not in log
    assert status.exit_code == 0 and not status.lost
    assert f"job sees LD_PRELOAD={preload_lib}" in log  # the job still gets its environment
    assert "evil loaded in the job" in log


def test_a_launch_out_of_file_descriptors_for_a_moment_is_retried(rig: Rig):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (in_use, hard))  # no new descriptor at all
    lifted = threading.Timer(0.08, resource.setrlimit, (resource.RLIMIT_NOFILE, (soft, hard)))
    lifted.start()
    try:
        rig.start(8, "exit 3")
    finally:
        lifted.join()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert rig.wait_end(8).exit_code == 3


NOBODY = RunAs("nobody", uid=65534, gid=65534, groups=(65534,), home="/nonexistent")


@pytest.mark.skipif(os.geteuid() != 0, reason="taking another identity needs root")
def test_a_job_run_as_a_user_drops_privileges_before_it_enters_its_workdir(
    rig: Rig, tmp_path: Path
):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)  # root's: nobody may not enter it
    rig.start(9, "id -u; id -g; id -G; echo HOME=$HOME", run_as=NOBODY, workdir=Path("/"))
    assert rig.wait_end(9).exit_code == 0
    assert rig.log(9).split()[:4] == ["65534", "65534", "65534", "HOME=/nonexistent"]
    rig.start(10, "pwd", run_as=NOBODY, workdir=private)
    assert rig.wait_end(10).exit_code == 127  # chdir after the drop: refused
    assert f"cannot run 'sh' in '{private}': Permission denied" in rig.log(10)


@pytest.mark.skipif(os.geteuid() != 0, reason="taking another identity needs root")
def test_a_job_run_as_a_user_can_neither_kill_its_supervisor_nor_write_its_status(rig: Rig):
    script = (
        "kill -9 $PPID 2>/dev/null || echo cannot-kill; "
        'printf x 2>/dev/null > "$JOBDIR/status.json" || echo cannot-write; exit 4'
    )
    rig.start(11, script, run_as=NOBODY, workdir=Path("/"))
    assert rig.wait_end(11).exit_code == 4
    assert rig.log(11).split() == ["cannot-kill", "cannot-write"]


# -- through a real server ---------------------------------------------------------------


# The server fixture's (tests/e2e/conftest.py) options: two declared GPUs.
SERVER_ARGS = ("--gpus", "2", "--cpus", "8", "--kill-grace", "1")


def test_a_forged_status_and_a_killed_supervisor_neither_free_gpus_nor_stop_a_restart(
    server: ServerProcess, tmp_path: Path
):
    """The audit's defect: the job was recorded COMPLETED, ended in 1970, and the restart
    died replaying it; its processes ran on, on GPUs given to the next job."""
    pidfile = tmp_path / "pid"
    jobs = server.state_dir / "jobs"
    script = (
        f"sleep 300 & echo $! > {pidfile}; "
        f"printf '%s' '{FORGED}' > \"{jobs}/$GPUYARD_JOB_ID/status.json\"; kill -9 $PPID; wait"
    )
    job_id = int(server.cli("submit", "--gpus", "2", "--", "sh", "-c", script).stdout)
    job = wait_ended(server.client(), job_id)
    assert job["state"] == "FAILED" and job["reason"].startswith("SupervisorLost")
    assert not pid_alive(int(pidfile.read_text()))
    server.kill9()
    server.start()  # the restart replays the run: it must start
    job = server.client().job(job_id)
    assert job["state"] == "FAILED"
    after = int(server.cli("submit", "--gpus", "2", "--", "true").stdout)
    assert server.cli("wait", str(after)).returncode == 0
