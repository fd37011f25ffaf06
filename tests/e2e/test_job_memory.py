"""Memory and processes for everyone (issue 23): a job without --mem gets the server's default
per CPU (Slurm's DefMemPerCPU), all jobs sit under one group that leaves the server a reserve,
an OOM kill names whose limit was reached, and one user's jobs together have a pids limit.

A real root server, put in a memory cgroup of its own with a small limit (as a systemd unit's
MemoryMax would), real Unix users submitting over its socket, real cgroups (v1 here)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.server import ServerProcess, wait_ended, wait_for
from tests.e2e.test_local_socket import as_user, call
from tests.e2e.unix_users import UnixUsers

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="real users and cgroups need root"),
]

MIB = 1 << 20


def _own_memory_group() -> Path:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return Path("/sys/fs/cgroup/memory") / path.lstrip("/")
    pytest.skip("no cgroup v1 memory controller here")


@pytest.fixture
def place() -> Iterator[Path]:
    """A folder every user may traverse (pytest's own tmp is root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="gymem-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def server_group() -> Iterator[Path]:
    """A memory cgroup for the server (made, removed after: its processes moved out first)."""
    group = _own_memory_group() / f"gytest-{uuid.uuid4().hex[:8]}"
    try:
        group.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot make a memory cgroup here ({exc})")
    yield group
    parent = group.parent / "cgroup.procs"
    for pid in (group / "cgroup.procs").read_text().split():
        try:
            parent.write_text(pid)
        except OSError:
            pass
    for inner in sorted(group.glob("**/"), key=lambda p: len(p.parts), reverse=True):
        try:
            inner.rmdir()
        except OSError:
            pass


def _server(place: Path, group: Path, limit_mib: int, **env: str) -> ServerProcess:
    (group / "memory.limit_in_bytes").write_text(str(limit_mib * MIB))
    base = {k: v for k, v in os.environ.items() if not k.startswith("GPUYARD_")}
    return ServerProcess(
        place / "state", "--gpus", "1", "--cpus", "8", "--kill-grace", "1",
        "--socket", str(place / "run" / "gpuyard.sock"), env={**base, **env},
        wrap=("sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(group)),
    ).start()  # fmt: skip


@pytest.fixture
def stop_after() -> Iterator[list[ServerProcess]]:
    started: list[ServerProcess] = []
    yield started
    for srv in started:
        srv.stop()
        srv.kill_jobs()


def _submit(server: ServerProcess, user: str, code: str, mem: str | None = None) -> int:
    body: dict[str, Any] = {"command": ["/usr/bin/python3", "-c", code], "workdir": "/tmp"}
    if mem is not None:
        body["mem"] = mem
    sock = server.state_dir.parent / "run" / "gpuyard.sock"
    status, job = as_user(user, call(sock, "POST", "/api/v1/jobs", body))
    assert status == 201, job
    return int(job["id"])


def _hold(mib: int, gate: Path) -> str:
    """A job that takes `mib` of RAM, says so, and holds it until `gate` exists."""
    return (
        f"import os, time\nb = b'x' * ({mib} << 20)\nprint('holding', flush=True)\n"
        f"t = time.monotonic()\nwhile not os.path.exists({str(gate)!r}) and "
        "time.monotonic() - t < 90:\n    time.sleep(0.05)\n"
    )


GROW = (  # takes RAM 20 MiB at a time, up to 2 GiB
    "import time\nb = []\nfor _ in range(100):\n    b.append(b'x' * (20 << 20))\n"
    "    time.sleep(0.02)\nprint('survived')\n"
)


def _holding(server: ServerProcess, job_id: int) -> None:
    client = server.client()
    wait_for(lambda: b"holding" in client.log(job_id), timeout_s=60)


def test_a_job_without_mem_gets_the_default_and_cannot_get_another_users_job_killed(
    place: Path, server_group: Path, users: UnixUsers, stop_after: list[ServerProcess]
) -> None:
    """Bob's job asks no --mem and takes RAM without end; Alice's holds 520 MiB within her
    --mem 700M. Before: Bob's job had no limit and sat in the server's group, whose limit
    the kernel then defended by killing the biggest job there, Alice's, blaming her --mem."""
    server = _server(place, server_group, 1100, GPUYARD_DEF_MEM_PER_CPU_MIB="200",
                     GPUYARD_JOBS_MEM_RESERVE_MIB="250")  # fmt: skip
    stop_after.append(server)
    gate = place / "gate"
    alice = _submit(server, users.alice, _hold(520, gate), mem="700M")
    _holding(server, alice)
    bob = _submit(server, users.bob, GROW)
    client = server.client()
    ended = wait_ended(client, bob, timeout_s=60)
    gate.touch()
    assert ended["state"] == "OUT_OF_MEMORY", ended
    assert ended["mem_mib"] == 200  # the default: 200 MiB a CPU, one CPU
    assert "used all its --mem 200M of host RAM" in ended["reason"], ended["reason"]
    assert "Mem: 200M" in server.cli("show", str(bob)).stdout.replace("  ", " ")
    hers = wait_ended(client, alice, timeout_s=60)
    assert hers["state"] == "COMPLETED", hers
    assert client.info()  # the server lives on


def test_jobs_together_at_their_limit_name_it_and_leave_the_server_its_reserve(
    place: Path, server_group: Path, users: UnixUsers, stop_after: list[ServerProcess]
) -> None:
    """Each job within its own --mem, together past what the server gives jobs (1100 MiB
    less a 500 MiB reserve): the kernel kills among the jobs, the reason says it was all
    jobs' limit and not the job's own, and the server (its group's other 500 MiB) lives on.
    Before: no such limit; the server's group ran out and the job killed was told it 'used all
    its --mem'."""
    server = _server(place, server_group, 1100, GPUYARD_JOBS_MEM_RESERVE_MIB="500")
    stop_after.append(server)
    gate = place / "gate"
    alice = _submit(server, users.alice, _hold(380, gate), mem="700M")
    _holding(server, alice)
    bob = _submit(server, users.bob, GROW.replace("range(100)", "range(30)"), mem="700M")
    client = server.client()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        jobs = [client.job(alice), client.job(bob)]
        if any(j["state"] == "OUT_OF_MEMORY" for j in jobs) or jobs[1]["state"] not in (
            "RUNNING", "PENDING"):  # fmt: skip
            break
        time.sleep(0.1)
    gate.touch()
    ends = [wait_ended(client, alice), wait_ended(client, bob)]
    killed = [j for j in ends if j["state"] == "OUT_OF_MEMORY"]
    assert killed, ends
    for job in killed:
        assert "within its --mem 700M" in job["reason"], job["reason"]
        assert "all jobs together reached the 600M" in job["reason"], job["reason"]
        assert "used all its --mem" not in job["reason"]
    assert client.info()  # the server was not the one killed


def test_one_users_jobs_together_are_held_to_the_users_pids_limit(
    place: Path, server_group: Path, users: UnixUsers, stop_after: list[ServerProcess]
) -> None:
    """Per job 40, per user 60: Bob's two jobs of 35 processes each cannot both have theirs;
    Alice's job, of another user, can. Before: each job alone was held, not a user's jobs."""
    server = _server(place, server_group, 4000, GPUYARD_JOB_PIDS_MAX="40",
                     GPUYARD_USER_PIDS_MAX="60")  # fmt: skip
    stop_after.append(server)
    gate = place / "gate"
    forks = (
        "import os, time, sys\nkids = 0\nfor _ in range(35):\n    try:\n"
        "        if os.fork() == 0:\n            time.sleep(4); os._exit(0)\n        kids += 1\n"
        "    except OSError as e:\n        print('cannot fork:', e); break\n"
        f"print('forked', kids, flush=True)\nwhile not os.path.exists({str(gate)!r}):\n"
        "    time.sleep(0.05)\n"
    )
    client = server.client()
    first = _submit(server, users.bob, forks)
    wait_for(lambda: b"forked" in client.log(first), timeout_s=60)
    second = _submit(server, users.bob, forks)
    wait_for(lambda: b"forked" in client.log(second), timeout_s=60)
    hers = _submit(server, users.alice, forks)
    wait_for(lambda: b"forked" in client.log(hers), timeout_s=60)
    gate.touch()
    for job_id in (first, second, hers):
        wait_ended(client, job_id, timeout_s=60)
    assert b"forked 35" in client.log(first)
    assert b"cannot fork" in client.log(second), client.log(second)
    assert b"forked 35" in client.log(hers), client.log(hers)


def test_submit_says_the_default_memory_a_job_without_mem_got(
    tmp_path: Path, stop_after: list[ServerProcess]
) -> None:
    """Before: `submit` printed the id alone, and the default limit came as a surprise at the
    job's OOM kill. Now the answer says the limit and how to change it; a job that gave --mem
    hears nothing of it."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("GPUYARD_")}
    server = ServerProcess(tmp_path / "state", "--gpus", "0", "--cpus", "4",
                           env={**base, "GPUYARD_DEF_MEM_PER_CPU_MIB": "300"})  # fmt: skip
    stop_after.append(server)
    server.start()
    given = server.cli("submit", "--cpus", "2", "--", "true")
    assert given.stderr.strip() == (
        "gpuyard: hint: no --mem given: the job is held to the default 600M of host RAM, "
        "300M per CPU x 2 (--mem to change it)"
    ), given.stderr
    job_id = int(given.stdout)
    assert wait_ended(server.client(), job_id)["mem_mib"] == 600  # what `show` says too
    assert "no --mem given" not in server.cli("submit", "--mem", "1G", "--", "true").stderr
