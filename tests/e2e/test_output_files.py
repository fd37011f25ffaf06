"""sbatch's -o/-e against a real server: the files Slurm's patterns name get the job's output
(and, with -e, its errors apart), appended; gpuyard's own log keeps everything. On a root
server the files are opened as the job's user: a link planted by that user never makes the
server write where the user may not."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.server import ServerProcess, wait_ended
from tests.e2e.unix_users import UnixUsers


def _submit(server: ServerProcess, cwd: Path, *args: str) -> str:
    return server.cli("submit", *args, cwd=cwd).stdout.strip()


def test_output_and_error_files_with_slurms_patterns(server: ServerProcess, tmp_path: Path):
    (tmp_path / "logs").mkdir()  # as with sbatch, the folder must be there
    job = _submit(server, tmp_path, "-J", "train", "-o", "logs/%x-%j.out", "-e", "logs/%A_%a.err",
                  "--", "sh", "-c", "echo to-out; echo to-err >&2")  # fmt: skip
    assert wait_ended(server.client(), job)["state"] == "COMPLETED"
    assert (tmp_path / f"logs/train-{job}.out").read_text() == "to-out\n"
    assert (tmp_path / f"logs/{job}_4294967294.err").read_text() == "to-err\n"
    log = server.cli("logs", job).stdout
    assert "to-out" in log and "to-err" in log  # gpuyard's own log stays complete


def test_without_e_both_streams_go_to_o_and_a_file_is_appended(server, tmp_path: Path):
    first = _submit(server, tmp_path, "-o", "run.out", "--", "sh", "-c", "echo one; echo two >&2")
    wait_ended(server.client(), first)
    second = _submit(server, tmp_path, "-o", "run.out", "--", "sh", "-c", "echo three")
    assert wait_ended(server.client(), second)["state"] == "COMPLETED"
    assert (tmp_path / "run.out").read_text().splitlines() == ["one", "two", "three"]


def test_each_array_task_writes_its_own_file(server: ServerProcess, tmp_path: Path):
    first = _submit(server, tmp_path, "--array", "0-2", "-o", "task-%A_%a.out", "--", "sh", "-c",
                    "echo task $SLURM_ARRAY_TASK_ID")  # fmt: skip
    array_id = int(first.split()[0].split("_")[0])
    client = server.client()
    for task in client.array(array_id):
        assert wait_ended(client, task["id"])["state"] == "COMPLETED"
    for index in range(3):
        out = tmp_path / f"task-{array_id}_{index}.out"
        assert out.read_text().split()[0] == "task"


def test_a_path_that_cannot_be_opened_fails_the_job_in_one_line(server, tmp_path: Path):
    job = _submit(server, tmp_path, "-o", "no/such/folder/%j.out", "--", "echo", "never")
    ended = wait_ended(server.client(), job)
    assert ended["state"] == "FAILED"
    assert "--output file" in ended["reason"] and "No such file or directory" in ended["reason"]
    assert "never" not in server.cli("logs", job).stdout  # as sbatch: the job did not run


def test_a_folder_named_by_the_job_is_made_and_a_fixed_one_is_not(server, tmp_path: Path):
    # submitit's `-o logs/%j/%j_0_log.out`: its client makes logs/<id>/ only once sbatch has
    # answered, and the job may start before; a folder written out in full must be there.
    (tmp_path / "logs").mkdir()
    job = _submit(server, tmp_path, "-o", "logs/%j/%x/out.log", "-J", "t", "--", "echo", "hi")
    assert wait_ended(server.client(), job)["state"] == "COMPLETED"
    assert (tmp_path / "logs" / job / "t" / "out.log").read_text() == "hi\n"
    typo = _submit(server, tmp_path, "-o", "lgos/%j/out.log", "--", "echo", "never")
    ended = wait_ended(server.client(), typo)
    assert ended["state"] == "FAILED" and "No such file or directory" in ended["reason"]
    assert not (tmp_path / "lgos").exists()


# -- a root server: the files are the job's user's to open ------------------------------------


@pytest.fixture
def place() -> Iterator[Path]:
    """Folders others may cross (pytest's own are root's alone)."""
    root = Path(tempfile.mkdtemp(prefix="gpuyard-out-", dir="/tmp"))
    root.chmod(0o711)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="jobs run as other users only on a root server")
def test_a_users_link_never_makes_a_root_server_write_a_root_file(users: UnixUsers, place):
    from fastapi.testclient import TestClient

    from gpuyard.bootstrap import build_app
    from gpuyard.domain.principal import Principal
    from gpuyard.settings import Settings

    alice = pwd.getpwnam(users.alice)
    victim = place / "root-only.conf"
    victim.write_text("root's own\n")
    victim.chmod(0o644)
    home = place / "alice"
    home.mkdir()
    os.chown(home, alice.pw_uid, alice.pw_gid)
    (home / "out.txt").symlink_to(victim)  # what alice can do in her own folder
    os.lchown(home / "out.txt", alice.pw_uid, alice.pw_gid)
    settings = Settings(state_dir=place / "state", gpus="1", cpus=4, kill_grace_s=1)
    server, app = build_app(settings)
    with TestClient(app, base_url="http://127.0.0.1:8765") as client:
        client.headers["Authorization"] = f"Bearer {settings.token_path.read_text().strip()}"
        assert client.post("/api/v1/admin/users", json={"name": users.alice}).status_code == 201
        assert server.accounts is not None
        secret, _ = server.accounts.create_token(Principal(users.alice, "user", None, "submit"))
        as_alice = {"Authorization": f"Bearer {secret}"}

        def run(output_path: str, error_path: str | None = None) -> dict:  # type: ignore[type-arg]
            body = {"command": ["sh", "-c", "echo pwned; echo err >&2"], "workdir": str(home),
                    "output_path": output_path, "error_path": error_path}  # fmt: skip
            answer = client.post("/api/v1/jobs", json=body, headers=as_alice)
            assert answer.status_code == 201, answer.text
            return _ended(client, answer.json()["id"])

        through_link = run("out.txt")
        assert through_link["state"] == "FAILED", through_link
        assert "cannot be opened as" in through_link["reason"]
        assert "it is a symbolic link" in through_link["reason"]
        into_root_folder = run("ok.out", error_path=str(place / "state" / "err-%j"))
        assert (
            into_root_folder["state"] == "FAILED" and "--error file" in into_root_folder["reason"]
        )
        assert victim.read_text() == "root's own\n"
        assert not list((place / "state").glob("err-*"))
        # Her own files are hers, made with her job's umask.
        mine = run("mine-%j.out")
        assert mine["state"] == "COMPLETED", mine
        made = home / f"mine-{mine['id']}.out"
        info = made.stat()
        assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (alice.pw_uid, 0o600)
        assert made.read_text() == "pwned\nerr\n"
        # A folder named by the job (submitit's logs/%j/) is made for her, as her: hers, and
        # never where she may not make one (a root folder stays as it was).
        per_job = run("logs-%j/out.txt")
        assert per_job["state"] == "COMPLETED", per_job
        folder = home / f"logs-{per_job['id']}"
        assert folder.stat().st_uid == alice.pw_uid
        assert (folder / "out.txt").read_text() == "pwned\nerr\n"
        into_root = run(str(place / "state" / "x-%j" / "out.txt"))
        assert into_root["state"] == "FAILED" and "cannot be opened as" in into_root["reason"]
        assert not list((place / "state").glob("x-*"))


def _ended(client, job_id: int) -> dict:  # type: ignore[no-untyped-def,type-arg]
    deadline = time.monotonic() + 30
    while True:
        job = client.get(f"/api/v1/jobs/{job_id}").json()
        if job["state"] not in ("PENDING", "RUNNING"):
            return job  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, "the job did not end"
        time.sleep(0.05)


@pytest.mark.skipif(os.geteuid() != 0, reason="jobs run as other users only on a root server")
def test_a_file_another_user_made_in_a_shared_folder_never_gets_the_jobs_output(
    users: UnixUsers, place: Path
) -> None:
    from fastapi.testclient import TestClient

    from gpuyard.bootstrap import build_app
    from gpuyard.domain.principal import Principal
    from gpuyard.settings import Settings

    alice, bob = pwd.getpwnam(users.alice), pwd.getpwnam(users.bob)
    shared = place / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # as /tmp: anyone makes files, only their owner removes them
    planted = shared / "alice.out"
    planted.touch()
    planted.chmod(0o666)  # bob's, writable by all: what alice writes there, bob reads
    os.chown(planted, bob.pw_uid, bob.pw_gid)
    (shared / "alice.err").symlink_to(planted)
    os.lchown(shared / "alice.err", alice.pw_uid, alice.pw_gid)  # even her own link
    settings = Settings(state_dir=place / "state", gpus="1", cpus=4, kill_grace_s=1)
    server, app = build_app(settings)
    with TestClient(app, base_url="http://127.0.0.1:8765") as client:
        client.headers["Authorization"] = f"Bearer {settings.token_path.read_text().strip()}"
        assert client.post("/api/v1/admin/users", json={"name": users.alice}).status_code == 201
        assert server.accounts is not None
        secret, _ = server.accounts.create_token(Principal(users.alice, "user", None, "submit"))
        body = {"command": ["sh", "-c", "echo alice-secret"], "workdir": str(shared)}
        for output, flag, why in (("alice.out", "--output", f"it belongs to {users.bob}"),
                                  ("mine.out", "--error", "it is a symbolic link")):  # fmt: skip
            extra = {"output_path": output} if flag == "--output" else {
                "output_path": output, "error_path": "alice.err"}
            answer = client.post("/api/v1/jobs", json={**body, **extra},
                                 headers={"Authorization": f"Bearer {secret}"})  # fmt: skip
            assert answer.status_code == 201, answer.text
            ended = _ended(client, answer.json()["id"])
            assert ended["state"] == "FAILED", ended
            assert f"{flag} file" in ended["reason"] and why in ended["reason"], ended["reason"]
        assert planted.read_text() == ""
