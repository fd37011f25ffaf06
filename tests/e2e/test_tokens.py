"""Tokens and accounts from the real CLI against a real server: a token made with `token
create` works from GPUYARD_TOKEN and from `gpuyard login`'s file (0600), is listed without its
secret, and is refused once revoked; admins add users and teams; a read token cannot submit."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

from tests.e2e.server import GPUYARD, ServerProcess


def _run(
    env: dict[str, str], *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run([GPUYARD, *args], capture_output=True, text=True, env=env,
                          input=stdin, timeout=60)  # fmt: skip


def _without_state_token(server: ServerProcess, tmp_path: Path) -> dict[str, str]:
    """The CLI's environment with no way to the state dir's token."""
    env = server.cli_env()
    env["GPUYARD_STATE_DIR"] = str(tmp_path / "elsewhere")
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    return env


def test_a_created_token_works_from_gpuyard_token_until_revoked(
    server: ServerProcess, tmp_path: Path
) -> None:
    made = server.cli("token", "create", "--expires", "1d")
    secret = made.stdout.strip()
    assert secret.startswith("gpy_") and made.stdout.count("\n") == 1
    assert "shown once" in made.stderr
    env = _without_state_token(server, tmp_path)
    assert _run(env, "queue").returncode == 1  # no token at all
    env["GPUYARD_TOKEN"] = secret
    job = _run(env, "submit", "--", "true")
    assert job.returncode == 0, job.stderr
    assert _run(env, "wait", job.stdout.strip()).returncode == 0
    listed = server.cli("token", "list").stdout
    assert secret not in listed
    header, row = listed.splitlines()
    assert header.split()[:3] == ["ID", "SCOPE", "CREATED"]
    token_id, scope = row.split()[:2]
    assert scope == "submit" and not row.endswith(" -")  # last used: just now
    everyone = server.cli("token", "list", "--all").stdout.splitlines()
    assert everyone[0].split()[:2] == ["ID", "USER"] and everyone[1].split()[0] == token_id
    server.cli("token", "revoke", token_id)
    refused = _run(env, "queue")
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1
    assert "revoked" in refused.stderr and "GPUYARD_TOKEN" in refused.stderr


def test_login_keeps_the_token_owner_only_and_later_commands_use_it(
    server: ServerProcess, tmp_path: Path
) -> None:
    secret = server.cli("token", "create", "--scope", "read").stdout.strip()
    env = _without_state_token(server, tmp_path)
    del env["GPUYARD_URL"]
    token_file = tmp_path / "t"
    token_file.write_text(secret + "\n")
    done = _run(env, "login", server.url, "--token-file", str(token_file))
    assert done.returncode == 0, done.stderr
    kept = tmp_path / "config" / "gpuyard" / "token"
    assert kept.read_text().strip() == secret
    assert stat.S_IMODE(os.stat(kept).st_mode) == 0o600
    assert _run(env, "queue").returncode == 0  # goes to the login URL with its token
    refused = _run(env, "submit", "--", "true")  # a read token
    assert refused.returncode == 1 and "scope is read" in refused.stderr
    again = _run(env, "login", server.url, stdin="gpy_not-a-token\n")  # from stdin: refused
    assert again.returncode == 1 and kept.read_text().strip() == secret


def test_admins_add_teams_and_users_and_disable_them(server: ServerProcess) -> None:
    server.cli("admin", "team", "add", "vision")
    server.cli("admin", "user", "add", "nobody", "--team", "vision")
    users = server.cli("admin", "user", "list").stdout
    assert any(line.split()[:3] == ["nobody", "user", "vision"] for line in users.splitlines())
    server.cli("admin", "user", "disable", "nobody")
    assert "disabled" in server.cli("admin", "user", "list").stdout
    server.cli("admin", "user", "enable", "nobody")
    assert "disabled" not in server.cli("admin", "user", "list").stdout
    taken = server.cli("admin", "user", "add", "nobody", check=False)
    assert taken.returncode == 1 and taken.stderr.startswith("gpuyard: user nobody already")
