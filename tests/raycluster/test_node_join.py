"""`gpuyard node join` for real: a Ray head of its own (`ray start --head --block` on this
machine's address and a free port, a fresh 0600 token), a worker joined with the command, seen
alive by a driver under its name with the GPUs it declared, its raylet given the agent's folder
and `--env`; both stopped by signalling this test's own processes (never `ray stop`, which
would stop every Ray of the machine), and nothing of theirs left.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.e2e.server import GPUYARD, free_port
from tests.raycluster.conftest import cluster_processes, ray_orphans, wait_until_gone

RAY = str(Path(sys.executable).parent / "ray")


def _host_ip() -> str:
    """This machine's own address: Ray resolves loopback to it, so a head on 127.0.0.1 could
    not be reached by a second process."""
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    v4 = [a for a in out if "." in a and not a.startswith("127.")]
    if not v4:
        pytest.skip("no IPv4 address of this machine (hostname -I)")
    return v4[0]


def _env(token: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token))
    return env


def _wait_port(ip: str, port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the Ray head exited {proc.returncode}:\n{log.read_text()}")
        try:
            with socket.create_connection((ip, port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"the Ray head did not listen in 60 s:\n{log.read_text()}")


def _stop(proc: subprocess.Popen[bytes]) -> int:
    """SIGTERM to the process group this test started it in (its own processes only)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        return proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait()


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A folder with a short path: Ray's sockets live under its session folders, and a Unix
    socket's path has ~107 bytes at most."""
    path = Path(tempfile.mkdtemp(prefix="gy-join-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def head(tmp_path: Path, short_dir: Path) -> Iterator[tuple[str, Path]]:
    token = tmp_path / "ray-token"
    token.write_text(secrets.token_hex(32))
    token.chmod(0o600)
    ip, port = _host_ip(), free_port()
    log = tmp_path / "head.log"
    with log.open("wb") as out:  # never a pipe: Ray's daemons inherit it
        proc = subprocess.Popen(
            [RAY, "start", "--head", "--block", f"--node-ip-address={ip}", f"--port={port}",
             "--include-dashboard=false", "--disable-usage-stats", "--num-gpus=0",
             "--num-cpus=1", f"--temp-dir={short_dir / 'head'}"],
            env={**_env(token), "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"},  # no Serve here
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        _wait_port(ip, port, proc, log)
        yield f"{ip}:{port}", token
    finally:
        _stop(proc)
        left = wait_until_gone(lambda: cluster_processes(str(token)) + ray_orphans(), 30)
        for orphan in left:
            try:
                orphan.kill()
            except psutil.Error:
                pass
        assert not left, f"Ray processes left after the head stopped: {left}"


_DRIVER = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from gpuyard.adapters.ray import RayConnection
    conn = RayConnection.connect(sys.argv[1], Path(sys.argv[2]))
    try:
        print(json.dumps([[n.name, n.alive, n.gpus] for n in conn.nodes()]))
    finally:
        conn.close()
""")


def _marked(token: Path, marker: str) -> list[psutil.Process]:
    """The cluster's processes whose environment has the worker's `--env` marker."""
    found = []
    for proc in cluster_processes(str(token)):
        try:
            if proc.environ().get("GPUYARD_TEST_MARK") == marker:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def _nodes(address: str, token: Path) -> list[list[object]]:
    out = subprocess.run(
        [sys.executable, "-c", _DRIVER, address, str(token)], env=_env(token),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_a_joined_machine_is_a_live_node_under_its_name_with_its_gpus(
    head: tuple[str, Path], tmp_path: Path, short_dir: Path
) -> None:
    address, token = head
    agent_dir = short_dir / "agent"
    marker = f"w-test-{secrets.token_hex(4)}"
    log = tmp_path / "join.log"
    with log.open("wb") as out:
        join = subprocess.Popen(
            [GPUYARD, "node", "join", address, "--node-name", "w-test", "--num-gpus", "2",
             "--num-cpus", "1", "--token-file", str(token), "--agent-dir", str(agent_dir),
             "--env", f"GPUYARD_TEST_MARK={marker}",
             "--env", "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S=0"],
            env={k: v for k, v in os.environ.items() if not k.startswith("RAY_")},
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while ["w-test", True, 2] not in (nodes := _nodes(address, token)):
            assert join.poll() is None, f"node join exited {join.returncode}:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"w-test not alive in 60 s: {nodes}"
            time.sleep(0.5)
        assert oct(agent_dir.stat().st_mode & 0o777) == oct(0o711)
        assert list((agent_dir / "ray").glob("session_*")), (
            "Ray's session not in the agent's folder"
        )
        raylets = [p for p in _marked(token, marker) if "raylet" in p.name()]
        assert raylets, "no raylet with the --env variable"
        assert raylets[0].environ()["GPUYARD_AGENT_DIR"] == str(agent_dir)
    finally:
        code = _stop(join)
    assert code == 1, log.read_text()  # ray start --block's own status after a SIGTERM
    mine = wait_until_gone(lambda: _marked(token, marker), 30)
    assert not mine, f"the joined node's processes outlived it: {mine}"
    deadline = time.monotonic() + 30
    while ["w-test", True, 2] in (nodes := _nodes(address, token)):
        assert time.monotonic() < deadline, f"w-test still alive 30 s after it stopped: {nodes}"
        time.sleep(0.5)
