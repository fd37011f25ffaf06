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
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.server import ServerProcess, wait_for

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


def _ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The step library, built with the machine's C compiler (`make test` installs gcc)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        why = "no C compiler to build the wall-clock step library (apt-get install gcc)"
        if _ci():
            pytest.fail(f"{why}; CI is set, so the clock-step tests must run")
        pytest.skip(why)
    built = tmp_path_factory.mktemp("wallclock") / "wallclock_step.so"
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-O2", "-o", str(built), str(SHIM_SOURCE), "-ldl",
         "-lpthread"],
        check=True,
    )  # fmt: skip
    return built


@pytest.fixture
def stepped(shim: Path, tmp_path: Path) -> Iterator[tuple[ServerProcess, Path]]:
    """A server whose wall clock is real time plus the seconds the returned file says (0)."""
    offset = tmp_path / "clock-offset"
    offset.write_text("0\n")
    env = {**os.environ, "LD_PRELOAD": str(shim), "GPUYARD_TEST_CLOCK_OFFSET_FILE": str(offset)}
    server = ServerProcess(tmp_path / "state", "--gpus", "1", "--cpus", "8",
                           "--kill-grace", str(GRACE_S), env=env)  # fmt: skip
    server.start()
    try:
        yield server, offset
    finally:
        server.stop()
        server.kill_jobs()


def _step_clock(server: ServerProcess, offset: Path, by_s: int) -> None:
    """Step the server's wall clock to `by_s` off real time, and wait until it reads so (a
    new job's submit time is the server's wall clock)."""
    offset.write_text(f"{by_s}\n")
    client = server.client()

    def done() -> bool:
        probe = client.submit(["true"], gpus=0)
        at = datetime.fromisoformat(str(probe["submitted_at"])).timestamp()
        return abs(at - time.time() - by_s) < 3_600

    wait_for(done, timeout_s=30, interval_s=0.2)


def _start(server: ServerProcess, beat: Path) -> dict[str, Any]:
    client = server.client()
    job = client.submit(["python3", "-c", HEARTBEAT, str(beat)], gpus=1,
                        time_limit=f"{LIMIT_S}s")  # fmt: skip
    wait_for(lambda: beat.exists())
    return wait_for(lambda: (j := client.job(job["id"]))["state"] == "RUNNING" and j)


def _ended(server: ServerProcess, job_id: int) -> dict[str, Any]:
    """The job once it has ended; a job extended by the step would not end in time."""
    bound = LIMIT_S + GRACE_S + MARGIN_S + 30
    client = server.client()
    return wait_for(lambda: (j := client.job(job_id))["state"] != "RUNNING" and j, bound)


def _ran_s(beat: Path) -> float:
    return float(beat.read_text())


def test_a_clock_stepped_a_day_forward_does_not_kill_a_job_which_ends_at_its_limit(
    stepped: tuple[ServerProcess, Path], tmp_path: Path
):
    server, offset = stepped
    beat = tmp_path / "beat"
    job = _start(server, beat)
    _step_clock(server, offset, DAY_S)
    assert server.client().job(job["id"])["state"] == "RUNNING"
    ended = _ended(server, job["id"])
    assert ended["state"] == "TIMEOUT"
    assert LIMIT_S - 1 <= _ran_s(beat) <= LIMIT_S + GRACE_S  # to its limit, not to the step


@pytest.mark.parametrize("by_s", [-DAY_S, DAY_S])
def test_a_clock_step_neither_hastens_nor_delays_the_servers_own_deadline(
    stepped: tuple[ServerProcess, Path], tmp_path: Path, by_s: int
):
    """The supervisor is stopped (SIGSTOP), so only the server's own deadline can end the job
    (limit + grace + margin): on the wall clock it would now be a day away, or long past."""
    server, offset = stepped
    beat = tmp_path / "beat"
    job = _start(server, beat)
    supervisor = int((server.state_dir / "jobs" / str(job["id"]) / "supervisor.pid").read_text())
    os.kill(supervisor, signal.SIGSTOP)
    try:
        _step_clock(server, offset, by_s)
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
