"""`gpuyard node join`: the Ray command line, environment and systemd unit it builds, and each
refusal, one line, before anything starts (the CLI run as a real process; the join itself,
against a real Ray head, is tests/raycluster/test_node_join.py)."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gpuyard.cli.node_joining import JoinRefused, JoinRequest, check_root, ray_argv, ray_env

GPUYARD = str(Path(sys.executable).parent / "gpuyard")


def _gpuyard(*args: str, user: int | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [GPUYARD, *args], capture_output=True, text=True, timeout=60,
        user=user, group=user, extra_groups=[] if user is not None else None,
    )  # fmt: skip


@pytest.fixture
def token(tmp_path: Path) -> Path:
    path = tmp_path / "ray-token"
    path.write_text(secrets.token_hex(32))
    path.chmod(0o600)
    return path


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_ray_is_joined_in_the_foreground_with_the_token_file_and_the_agent_folder() -> None:
    request = JoinRequest(
        address="10.0.0.1:6379", node_name="gpu2", token_file="/etc/gpuyard/ray-token",
        agent_dir="/var/lib/gpuyard-agent", num_gpus=8, memory_mib=1024,
        extra_env={"LD_LIBRARY_PATH": "/opt/lib"}, ray_options=("--node-manager-port=6380",),
    )  # fmt: skip
    argv = ray_argv(request, Path("/venv/bin/ray"))
    assert argv == [
        "/venv/bin/ray", "start", "--address=10.0.0.1:6379", "--block", "--disable-usage-stats",
        "--node-name=gpu2", "--temp-dir=/var/lib/gpuyard-agent/ray", "--num-gpus=8",
        f"--memory={1024 * 2**20}", "--node-manager-port=6380",
    ]  # fmt: skip
    env = ray_env(request, {"PATH": "/usr/bin", "RAY_AUTH_TOKEN": "old"})
    assert env == {
        "PATH": "/usr/bin", "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": "/etc/gpuyard/ray-token",
        "GPUYARD_AGENT_DIR": "/var/lib/gpuyard-agent", "LD_LIBRARY_PATH": "/opt/lib",
    }  # fmt: skip


def test_print_unit_is_a_service_running_the_same_join_and_starts_nothing(tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    out = _gpuyard(
        "node", "join", "10.0.0.1:6379", "--node-name", "gpu2", "--num-gpus", "4",
        "--agent-dir", str(agent), "--env", "X=a $HOME", "--ray-option=--min-worker-port=20000",
        "--print-unit",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "Restart=always" in lines
    assert "After=network-online.target" in lines
    assert "KillMode=process" in lines  # a stop leaves the jobs to their supervisors
    (exec_start,) = [line for line in lines if line.startswith("ExecStart=")]
    assert exec_start == (
        f"ExecStart={GPUYARD} node join 10.0.0.1:6379 --node-name gpu2 --token-file "
        f"/etc/gpuyard/ray-token --agent-dir {agent} --num-gpus 4 --env 'X=a $$HOME' "
        "--ray-option=--min-worker-port=20000"
    )
    assert not agent.exists()


def test_a_missing_token_file_is_refused_in_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    out = _gpuyard("node", "join", f"127.0.0.1:{_closed_port()}", "--token-file", str(missing),
                   "--agent-dir", str(tmp_path / "agent"))  # fmt: skip
    assert out.returncode == 1
    assert out.stderr.startswith(f"gpuyard: no cluster token file {missing}: ")
    assert len(out.stderr.splitlines()) == 1
    assert not (tmp_path / "agent").exists()


def test_a_token_file_others_may_read_is_refused_with_the_fix(token: Path, tmp_path: Path) -> None:
    token.chmod(0o640)
    out = _gpuyard("node", "join", f"127.0.0.1:{_closed_port()}", "--token-file", str(token),
                   "--agent-dir", str(tmp_path / "agent"))  # fmt: skip
    assert out.returncode == 1
    assert out.stderr == (
        f"gpuyard: the cluster token file {token} is readable by others (mode 0640): "
        f"chmod 600 {token}\n"
    )


def test_an_unreachable_head_is_refused_before_ray_starts(token: Path, tmp_path: Path) -> None:
    address = f"127.0.0.1:{_closed_port()}"
    out = _gpuyard("node", "join", address, "--token-file", str(token),
                   "--agent-dir", str(tmp_path / "agent"))  # fmt: skip
    assert out.returncode == 1
    assert out.stderr.startswith(f"gpuyard: cannot reach the Ray head at {address}: ")
    assert out.stderr.endswith(
        "start the head first (ray start --head ...) or check the firewall\n"
    )
    assert not (tmp_path / "agent").exists()


def test_an_address_without_a_port_is_refused(token: Path) -> None:
    out = _gpuyard("node", "join", "10.0.0.1", "--token-file", str(token))
    assert out.returncode == 1
    assert "give HOST:PORT, e.g. 10.0.0.1:6379" in out.stderr


def test_anyone_but_root_is_told_to_run_it_as_root() -> None:
    with pytest.raises(JoinRefused, match=r"^gpuyard node join must run as root \(the machine"):
        check_root(1000)
    check_root(0)


@pytest.mark.skipif(os.geteuid() != 0, reason="running as another user needs root")
def test_the_command_run_by_another_user_refuses_in_one_line(token: Path) -> None:
    try:
        out = _gpuyard("node", "join", "10.0.0.1:6379", "--token-file", str(token), user=65534)
    except PermissionError:
        pytest.skip("this Python install is not reachable by other users")
    assert out.returncode == 1
    assert out.stderr.startswith("gpuyard: gpuyard node join must run as root")
    assert len(out.stderr.splitlines()) == 1
