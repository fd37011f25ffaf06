"""A wall-clock step neither kills nor extends a job: the server runs with a wall clock the test
steps a day forward or back while a job runs.

How the clock is stepped: `wallclock_step.c`, compiled here and preloaded into the server only,
makes CLOCK_REALTIME (and `gettimeofday`, `time`) read an offset off real time, the offset
read from a file the test rewrites; the monotonic and boot-time clocks, sleeps and timers stay
real, which is exactly what a real step (`date -s`, an NTP step) does to a process. Stepping
the machine's own clock would do it to every process on a shared machine. libfaketime was
tried first and cannot do this reliably: told to leave monotonic time alone
(FAKETIME_DONT_FAKE_MONOTONIC), 0.9.10 still shifts `clock_nanosleep`'s absolute monotonic
deadlines by the offset, so Python's `time.sleep` fails with EINVAL in the server as soon as
the offset exceeds the machine's uptime, and it refuses `setitimer` (EINVAL).

A real step also moves the boot time the kernel gives in wall-clock terms (`btime` in
/proc/stat, computed as the wall clock less the time since boot), and with it every process's
start time as psutil reports it: the server runs in a mount namespace of its own (`unshare -m`)
where /proc/stat is a copy the test rewrites with `btime` stepped as the clock is.

The supervisors are not preloaded (the server starts them with `PATH` alone), and need not be:
their time limit is a kernel interval timer on the monotonic clock. These tests hold the
server's side to account: the executor's own deadlines (time limit + grace + margin, the guard
that ends a job whose supervisor cannot act), and what it makes of the job's end. The job keeps
a heartbeat on the real monotonic clock: how long it truly ran.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.server import ServerProcess, pid_alive, wait_ended, wait_for
from tests.needs import missing

SHIM_SOURCE = Path(__file__).with_name("wallclock_step.c")
DAY_S = 86_400
LIMIT_S = 20
GRACE_S = 1
MARGIN_S = 5  # the executor's guard margin past limit + grace (LocalExecutor's default)

# Writes how long it has run (real monotonic seconds) to BEAT every 0.1 s, atomically.
HEARTBEAT = (
    "import os, sys, time\n"
    "beat = sys.argv[1]; began = time.monotonic()\n"
    "while True:\n"
    "    with open(beat + '.tmp', 'w') as f:\n"
    "        f.write(repr(time.monotonic() - began))\n"
    "    os.replace(beat + '.tmp', beat)\n"
    "    time.sleep(0.1)\n"
)


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The step library, built with the machine's C compiler (`make test` installs gcc)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        missing(
            "no C compiler to build the wall-clock step library (apt-get install gcc)",
            "the clock-step tests",
        )
    built = tmp_path_factory.mktemp("wallclock") / "wallclock_step.so"
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-O2", "-o", str(built), str(SHIM_SOURCE), "-ldl",
         "-lpthread"],
        check=True,
    )  # fmt: skip
    return built


# Runs its arguments with $0 (the test's copy) in place of /proc/stat, in its own mount namespace.
PRIVATE_PROC_STAT = 'mount --bind "$0" /proc/stat && exec "$@"'


@dataclass
class Clock:
    """The server's wall clock: the shim's offset file and its copy of /proc/stat."""

    offset: Path
    proc_stat: Path
    real_stat: str

    def step(self, by_s: int) -> None:
        self.offset.write_text(f"{by_s}\n")
        lines = []
        for line in self.real_stat.splitlines():
            if line.startswith("btime "):
                line = f"btime {int(line.split()[1]) + by_s}"
            lines.append(line)
        with open(self.proc_stat, "w") as f:  # in place: the bind mount holds this inode
            f.write("\n".join(lines) + "\n")


@pytest.fixture
def stepped(
    request: pytest.FixtureRequest, shim: Path, tmp_path: Path
) -> Iterator[tuple[ServerProcess, Clock]]:
    """A server whose wall clock is real time plus what `Clock.step` last said (0); the
    test's parameter, if any, is more environment for it."""
    why = None
    if os.geteuid() != 0:
        why = "a private /proc/stat (a mount namespace) needs root"
    elif shutil.which("unshare") is None:
        why = "unshare (util-linux) is missing"
    if why is not None:
        missing(why, "the clock-step tests")
    real_stat = Path("/proc/stat").read_text()
    clock = Clock(tmp_path / "clock-offset", tmp_path / "proc-stat", real_stat)
    clock.step(0)
    env = {**os.environ, "LD_PRELOAD": str(shim),
           "GPUYARD_TEST_CLOCK_OFFSET_FILE": str(clock.offset),
           **getattr(request, "param", {})}  # fmt: skip
    wrap = ("unshare", "-m", "--propagation", "private", "sh", "-c", PRIVATE_PROC_STAT,
            str(clock.proc_stat))  # fmt: skip
    server = ServerProcess(tmp_path / "state", "--gpus", "1", "--cpus", "8",
                           "--kill-grace", str(GRACE_S), env=env, wrap=wrap)  # fmt: skip
    server.start()
    try:
        yield server, clock
    finally:
        server.stop()
        server.kill_jobs()


def _step_clock(server: ServerProcess, clock: Clock, by_s: int) -> None:
    """Step the server's wall clock to `by_s` off real time, and wait until it reads so (a
    new job's submit time is the server's wall clock)."""
    clock.step(by_s)
    client = server.client()

    def done() -> bool:
        probe = client.submit(["true"], gpus=0)
        at = datetime.fromisoformat(str(probe["submitted_at"])).timestamp()
        return abs(at - time.time() - by_s) < 3_600

    wait_for(done, timeout_s=30, interval_s=0.2)


def _start(server: ServerProcess, beat: Path, limit_s: int | None = LIMIT_S) -> dict[str, Any]:
    client = server.client()
    limit = {} if limit_s is None else {"time_limit": f"{limit_s}s"}
    job = client.submit(["python3", "-c", HEARTBEAT, str(beat)], gpus=1, **limit)
    wait_for(lambda: beat.exists())
    return wait_for(lambda: (j := client.job(job["id"]))["state"] == "RUNNING" and j)


def _ended(server: ServerProcess, job_id: int) -> dict[str, Any]:
    """The job once it has ended; a job extended by the step would not end in time."""
    bound = LIMIT_S + GRACE_S + MARGIN_S + 30
    client = server.client()
    return wait_ended(client, job_id, bound)


def _ran_s(beat: Path) -> float:
    return float(beat.read_text())


def test_a_clock_stepped_a_day_forward_does_not_kill_a_job_which_ends_at_its_limit(
    stepped: tuple[ServerProcess, Clock], tmp_path: Path
):
    server, clock = stepped
    beat = tmp_path / "beat"
    job = _start(server, beat)
    _step_clock(server, clock, DAY_S)
    assert server.client().job(job["id"])["state"] == "RUNNING"
    ended = _ended(server, job["id"])
    assert ended["state"] == "TIMEOUT"
    assert LIMIT_S - 1 <= _ran_s(beat) <= LIMIT_S + GRACE_S  # to its limit, not to the step


@pytest.mark.parametrize("by_s", [-DAY_S, DAY_S])
def test_a_clock_step_neither_hastens_nor_delays_the_servers_own_deadline(
    stepped: tuple[ServerProcess, Clock], tmp_path: Path, by_s: int
):
    """The supervisor is stopped (SIGSTOP), so only the server's own deadline can end the job
    (limit + grace + margin): on the wall clock it would now be a day away, or long past."""
    server, clock = stepped
    beat = tmp_path / "beat"
    job = _start(server, beat)
    supervisor = int((server.state_dir / "jobs" / str(job["id"]) / "supervisor.pid").read_text())
    os.kill(supervisor, signal.SIGSTOP)
    try:
        _step_clock(server, clock, by_s)
        assert server.client().job(job["id"])["state"] == "RUNNING"
        ended = _ended(server, job["id"])
    finally:
        try:
            os.kill(supervisor, signal.SIGCONT)
        except ProcessLookupError:
            pass
    assert ended["state"] == "TIMEOUT"
    # Ended by the executor: past the limit and the grace, at most its margin and a grace later.
    assert LIMIT_S + GRACE_S <= _ran_s(beat) <= LIMIT_S + 2 * GRACE_S + MARGIN_S + 2


def test_a_job_can_be_cancelled_after_the_clock_stepped(
    stepped: tuple[ServerProcess, Clock], tmp_path: Path
):
    """The server knows its supervisors by pid and start time: a start time read on the wall
    clock's terms moved with the step, and a cancel would be ignored as not the job's."""
    server, clock = stepped
    job = _start(server, tmp_path / "beat", limit_s=None)  # only the cancel can end it
    _step_clock(server, clock, DAY_S)
    server.client().cancel(job["id"])
    ended = _ended(server, job["id"])
    assert ended["state"] == "CANCELLED"


def test_a_server_restarted_after_the_clock_stepped_adopts_its_running_jobs_again(
    stepped: tuple[ServerProcess, Clock], tmp_path: Path
):
    server, clock = stepped
    go = tmp_path / "go"
    client = server.client()
    job = client.submit(["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done"], gpus=1)
    wait_for(lambda: client.job(job["id"])["state"] == "RUNNING")
    _step_clock(server, clock, -DAY_S)
    server.kill9()
    server.start()
    client = server.client()
    assert client.job(job["id"])["state"] == "RUNNING"  # adopted again, not ended as lost
    go.touch()
    ended = _ended(server, job["id"])
    assert (ended["state"], ended["exit_code"]) == ("COMPLETED", 0)


# Without per-job cgroups, whose removal would kill what is left of the job anyway.
@pytest.mark.parametrize("stepped", [{"GPUYARD_JOB_CGROUPS": "0"}], indirect=True)
def test_a_job_whose_supervisor_dies_after_a_step_back_is_ended_before_its_end_is_told(
    stepped: tuple[ServerProcess, Clock], tmp_path: Path
):
    """Its processes are found and ended before its GPUs are given on: after a step back
    their start times (read in wall-clock terms) look older than their supervisor's."""
    server, clock = stepped
    pidfile = tmp_path / "job.pid"
    client = server.client()
    job = client.submit(["sh", "-c", f"echo $$ > {pidfile}; while true; do sleep 0.1; done"],
                        gpus=1)  # fmt: skip
    wait_for(lambda: pidfile.exists() and pidfile.read_text().strip())
    job_pid = int(pidfile.read_text())
    _step_clock(server, clock, -DAY_S)
    supervisor = int((server.state_dir / "jobs" / str(job["id"]) / "supervisor.pid").read_text())
    os.kill(supervisor, signal.SIGKILL)
    try:
        ended = _ended(server, job["id"])
        assert ended["state"] == "FAILED"  # its supervisor was lost
        assert not pid_alive(job_pid)  # ended before its end was told (its GPU is free now)
    finally:
        if pid_alive(job_pid):  # left behind: not for the next test to find
            os.kill(job_pid, signal.SIGKILL)
