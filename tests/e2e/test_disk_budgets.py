"""Disk budgets (issue 23): a job's log has a budget, cut with one line (in the log and in
`show`); no log takes the state disk's reserve, so a new user's registration and a submit still
land; a cancel of the job that filled the disk stops it at once, its record following once
there is room. A real root server whose state dir is a small real tmpfs."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.server import ServerProcess, pid_alive, wait_ended, wait_for
from tests.e2e.test_local_socket import as_user, call, place  # noqa: F401 (a fixture)
from tests.e2e.unix_users import UnixUsers
from tests.small_disk import small_disk

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="a small disk and real users need root"),
]


@pytest.fixture
def started() -> Iterator[list[ServerProcess]]:
    servers: list[ServerProcess] = []
    yield servers
    for srv in servers:
        srv.stop()
        srv.kill_jobs()


def _server(state: Path, started: list[ServerProcess], sock: Path | None = None,
            **env: str) -> ServerProcess:  # fmt: skip
    base = {k: v for k, v in os.environ.items() if not k.startswith("GPUYARD_")}
    extra = ("--socket", str(sock)) if sock is not None else ()
    srv = ServerProcess(state, "--gpus", "1", "--cpus", "4", "--kill-grace", "1", *extra,
                        env={**base, **env})  # fmt: skip
    started.append(srv)
    return srv.start()


def _submit(server: ServerProcess, code: str) -> int:
    return int(server.cli("submit", "--", "/usr/bin/python3", "-c", code).stdout)


def test_a_log_past_its_budget_is_cut_with_one_line_in_the_log_and_in_show(
    tmp_path: Path, started: list[ServerProcess]
) -> None:
    server = _server(tmp_path / "state", started, GPUYARD_JOB_LOG_MAX_MIB="1")
    job_id = _submit(server, "import sys\nfor _ in range(3 * 1024): print('x' * 1023)")
    job = wait_ended(server.client(), job_id)
    assert job["state"] == "COMPLETED", job
    log = Path(job["log_path"])
    assert log.stat().st_size < (1 << 20) + 4096
    assert "log cut: this job's output reached its log budget" in log.read_text()
    assert "log truncated (" in server.cli("show", str(job_id)).stdout


def test_a_log_stops_short_of_the_disks_reserve_so_a_new_user_and_a_submit_still_land(
    tmp_path: Path,
    place: Path,  # noqa: F811
    users: UnixUsers,
    started: list[ServerProcess],
) -> None:
    """Before: the log took the disk to its last byte; the next submit got 507 and a new local
    user's first request a 500."""
    with small_disk(place / "state", size_mib=24) as disk:
        sock = place / "run" / "gpuyard.sock"
        server = _server(disk, started, sock, GPUYARD_STATE_DISK_RESERVE_MIB="4")
        job_id = _submit(server, "import sys\nfor _ in range(64 * 1024): print('x' * 1023)")
        job = wait_ended(server.client(), job_id, timeout_s=60)
        assert "log cut: the state disk is down to the space the server keeps" in Path(
            job["log_path"]).read_text()  # fmt: skip
        assert os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize >= 3 << 20
        body = {"command": ["true"], "workdir": "/tmp"}
        status, answer = as_user(users.bob, call(sock, "POST", "/api/v1/jobs", body))
        assert status == 201, answer  # registered on first use, and queued
        assert wait_ended(server.client(), int(answer["id"]))["state"] == "COMPLETED"
        server.stop()


def test_cancelling_the_job_that_filled_the_disk_stops_it_at_once(
    tmp_path: Path, started: list[ServerProcess]
) -> None:
    """Before: the cancel answered 200 and nothing happened until an admin freed space."""
    pid_file = tmp_path / "job.pid"
    with small_disk(tmp_path / "state", size_mib=16) as disk:
        server = _server(disk, started)
        fill = (
            f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
            "f = open(os.path.join(os.environ['GPUYARD_CHECKPOINT_DIR'], 'fill'), 'wb')\n"
            "try:\n    while True:\n        f.write(b'x' * 65536); f.flush()\n"
            "except OSError:\n    pass\ntime.sleep(120)\n"
        )
        job_id = _submit(server, fill)
        pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text()))
        wait_for(lambda: os.statvfs(disk).f_bavail == 0, timeout_s=60)
        server.cli("cancel", str(job_id), check=False)
        wait_for(lambda: not pid_alive(pid), timeout_s=20)  # the stop did not wait for room
        (disk / "jobs" / str(job_id) / "checkpoint" / "fill").unlink()
        assert wait_ended(server.client(), job_id)["state"] == "CANCELLED"  # the record follows
        server.stop()


def _writer(gate: Path, mib: int, wait_for_count: int = 0) -> str:
    """A job that (after `wait_for_count` jobs have touched `gate`, so they all write at
    once) prints `mib` MiB of whole lines."""
    return (
        "import os, sys, time\n"
        f"gate = {str(gate)!r}\n"
        "open(os.path.join(gate, os.environ['GPUYARD_JOB_ID']), 'w').close()\n"
        f"while len(os.listdir(gate)) < {wait_for_count}:\n    time.sleep(0.02)\n"
        f"for _ in range({mib} * 1024):\n    sys.stdout.write('x' * 1023 + '\\n')\n"
    )


def test_one_users_jobs_together_stay_within_the_per_user_budget_and_leave_another_user_alone(
    place: Path,  # noqa: F811
    users: UnixUsers,
    started: list[ServerProcess],
) -> None:
    """Before: each of alice's jobs got what was left of her budget at its launch, so four at
    once wrote three budgets. Now her logs together pass it by less than the bound of
    `supervisor._over_budget` (3 jobs x (64 KiB + 64 KiB) here), and bob's job, running at the
    same time, keeps all of its output."""
    sock = place / "run" / "gpuyard.sock"
    server = _server(place / "state", started, sock, GPUYARD_USER_LOG_MAX_MIB="2",
                     GPUYARD_JOB_LOG_MAX_MIB="0")  # fmt: skip
    gate = place / "gate"
    gate.mkdir()
    gate.chmod(0o777)

    def submit(user: str, code: str) -> int:
        body = {"command": ["/usr/bin/python3", "-c", code], "workdir": "/tmp"}
        status, answer = as_user(user, call(sock, "POST", "/api/v1/jobs", body))
        assert status == 201, answer
        return int(answer["id"])

    alices = [submit(users.alice, _writer(gate, 3, wait_for_count=4)) for _ in range(3)]
    bobs = submit(users.bob, _writer(gate, 1, wait_for_count=4))
    ended = {
        job_id: wait_ended(server.client(), job_id, timeout_s=60) for job_id in [*alices, bobs]
    }
    assert all(job["state"] == "COMPLETED" for job in ended.values()), ended
    total = sum(Path(ended[job_id]["log_path"]).stat().st_size for job_id in alices)
    assert total < (2 << 20) + 3 * (128 << 10), total  # before: about 6 MiB
    cut = [job_id for job_id in alices if "log cut: this job's output reached its log budget"
           in Path(ended[job_id]["log_path"]).read_text()]  # fmt: skip
    assert cut, "none of alice's logs says it was cut"
    assert "log truncated (" in server.cli("show", str(cut[0])).stdout
    bob_log = Path(ended[bobs]["log_path"]).read_text()
    assert "log cut" not in bob_log
    assert bob_log.count("x" * 1023 + "\n") == 1024  # all of bob's 1 MiB
    server.stop()


def test_a_jobs_checkpoints_count_toward_its_disk_budget(
    tmp_path: Path, started: list[ServerProcess]
) -> None:
    """Before: only logs counted, so a job whose checkpoint folder held its whole budget still
    logged a full budget beside it. Now the checkpoints take their room from the log."""
    server = _server(tmp_path / "state", started, GPUYARD_JOB_LOG_MAX_MIB="2")
    code = (
        "import os, sys\n"
        "with open(os.path.join(os.environ['GPUYARD_CHECKPOINT_DIR'], 'ckpt.pt'), 'wb') as f:\n"
        "    f.write(b'w' * (3 << 19))\n"  # 1.5 MiB of checkpoint
        "for _ in range(2 * 1024):\n    sys.stdout.write('x' * 1023 + '\\n')\n"
    )
    job_id = _submit(server, code)
    job = wait_ended(server.client(), job_id)
    assert job["state"] == "COMPLETED", job
    log = Path(job["log_path"])
    assert log.stat().st_size < (1 << 19) + (128 << 10), log.stat().st_size  # before: 2 MiB
    assert "log cut: this job's output reached its log budget" in log.read_text()
    assert "log truncated (" in server.cli("show", str(job_id)).stdout
