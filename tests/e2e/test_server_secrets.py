"""The server's own secrets stay with it (issue 11): its environment never reaches a job (an
allowlist plus what the submitter sent), its state dir and files are closed to other users,
and it refuses a state dir or token that another user could have planted."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.server import GPUYARD, ServerProcess, free_port, wait_for

SECRET = "s3cr3t-of-the-server"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    env = {**os.environ, "AWS_SECRET_ACCESS_KEY": SECRET, "PGPASSWORD": SECRET, "LC_TIME": "C"}
    srv = ServerProcess(tmp_path / "state", "--gpus", "1", "--kill-grace", "1", env=env)
    srv.start()
    yield srv
    srv.stop()
    srv.kill_jobs()


def _log_of(server: ServerProcess, *submit: str) -> str:
    job_id = int(server.cli("submit", *submit).stdout)
    wait_for(lambda: server.client().job(job_id)["state"] == "COMPLETED")
    return (server.state_dir / "jobs" / str(job_id) / "output.log").read_text()


def test_the_servers_environment_never_reaches_a_job(server: ServerProcess):
    # The CLI runs in the same environment as the server here: what it exports by default
    # (PATH, the virtualenv, HOME, ...) still arrives, the secrets do not.
    env = dict(line.split("=", 1) for line in _log_of(server, "--", "env").splitlines())
    assert SECRET not in "".join(env.values())
    assert not {"AWS_SECRET_ACCESS_KEY", "PGPASSWORD", "GPUYARD_URL"} & env.keys()
    assert env["PATH"] == os.environ["PATH"] and env["LC_TIME"] == "C"  # allowed from server
    assert env["HOME"] and env["USER"] and env["LOGNAME"] == env["USER"]
    sent = _log_of(server, "--no-export-env", "--env", "MINE=1", "--", "env")
    assert "MINE=1" in sent.splitlines() and SECRET not in sent


def test_state_dir_and_files_are_the_servers_alone(server: ServerProcess):
    _log_of(server, "--", "true")
    state = server.state_dir
    expected_dir = 0o711 if os.geteuid() == 0 else 0o700  # root: jobs cross it to their folder
    assert stat.S_IMODE(state.stat().st_mode) == expected_dir
    for path in (state / "gpuyard.db", state / "token", state / "jobs" / "1" / "output.log"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    if os.geteuid() == 0:  # pytest's tmp folders are root's alone: other users cannot cross
        assert "jobs run as their owners cannot reach their folders" in server.log.read_text()


def _refusal(state: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k != "GPUYARD_TOKEN"}
    result = subprocess.run(
        [GPUYARD, "server", "--state-dir", str(state), "--port", str(free_port()), "--gpus", "1"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_a_state_dir_or_token_others_may_write_is_refused(tmp_path: Path):
    state = tmp_path / "shared"
    state.mkdir()
    state.chmod(0o777)
    assert f"the state dir {state} may be written by other users" in _refusal(state)
    state.chmod(0o700)
    (state / "token").write_text("planted\n")
    (state / "token").chmod(0o666)
    assert f"the token file {state / 'token'} may be written by other users" in _refusal(state)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder away needs root")
def test_a_state_dir_of_another_user_is_refused(tmp_path: Path):
    state = tmp_path / "theirs"
    state.mkdir(mode=0o700)
    os.chown(state, 65534, 65534)
    line = _refusal(state)
    assert f"the state dir {state} belongs to uid 65534" in line and "--state-dir" in line


def test_the_database_password_comes_from_a_file_never_the_command_line(
    postgres_server, tmp_path: Path
) -> None:
    from gpuyard.settings import Settings

    secret = "pw-of-the-db"
    db = postgres_server.create_database("secretfile")  # postgresql://postgres@127.0.0.1:P/...
    pw_file = tmp_path / "db-password"
    pw_file.write_text(secret + "\n")
    pw_file.chmod(0o600)
    # The URL the server connects with carries it (the test cluster trusts loopback: any
    # password is accepted, so it is checked here, where it is put in).
    made = Settings.from_env(database_url=db, db_password_file=str(pw_file))
    assert made.database_url is not None and f":{secret}@" in made.database_url
    srv = ServerProcess(tmp_path / "state", "--gpus", "1", "--kill-grace", "1", "--db", db,
                        "--db-password-file", str(pw_file)).start()  # fmt: skip
    try:
        assert srv.proc is not None
        cmdline = Path(f"/proc/{srv.proc.pid}/cmdline").read_bytes()
        assert secret.encode() not in cmdline and b"--db-password-file" in cmdline
        assert srv.client().whoami()["role"] == "admin"  # it serves, on that database
    finally:
        srv.stop()
    pw_file.chmod(0o644)  # every user may read it: refused in one line
    refused = subprocess.run(
        [GPUYARD, "server", "--state-dir", str(tmp_path / "other"), "--port", str(free_port()),
         "--db", db, "--db-password-file", str(pw_file)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.strip().splitlines() == [
        f"gpuyard: --db-password-file {pw_file} may be read by every user: "
        f"`chmod o-r {pw_file}` (or 600)"
    ]


def test_a_password_in_the_db_url_is_warned_of_and_never_shown(tmp_path: Path) -> None:
    secret = "in-the-url"
    started = subprocess.run(
        [GPUYARD, "server", "--state-dir", str(tmp_path / "state"), "--port", str(free_port()),
         "--db", f"nosuchdb://u:{secret}@127.0.0.1:1/x"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert started.returncode == 1
    first = started.stderr.splitlines()[0]
    assert first.startswith("warning: the --db URL's password is on the command line")
    assert "--db-password-file" in first and secret not in started.stderr
