"""One local Ray cluster per test module: this process is the head, plus one more raylet; each
node declares 2 logical GPUs and 2 CPUs (no real GPU needed: Ray still hands out GPU ids and
sets CUDA_VISIBLE_DEVICES). Token auth is on, as in the server. A lost raylet is noticed in
~1.5 s (`node_timeout_s`), not Ray's default ~30 s.

Teardown checks that no process of the cluster is left: every Ray process of it inherited
`RAY_AUTH_TOKEN_PATH` pointing at this module's token file, so they are found by that.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

# Ray is an extra (`pip install 'gpuyard[ray]'`; `make test` installs it): without it these
# tests are skipped, not a collection error that stops the whole run.
pytest.importorskip("ray")

from gpuyard.adapters.ray import LocalNodeSpec, RayConnection
from tests.e2e.server import ServerProcess

NODE = LocalNodeSpec(gpus=2, cpus=2)


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayConnection]:
    state = tmp_path_factory.mktemp("ray-state")
    conn = RayConnection.start_local(state, nodes=[NODE, NODE], node_timeout_s=1.5)
    token_path = str(state / "ray_auth_token")
    try:
        yield conn
    finally:
        conn.close()
        left = wait_until_gone(lambda: cluster_processes(token_path) + ray_orphans(), timeout_s=20)
        for proc in left:  # never leave them to the next test run
            try:
                proc.kill()
            except psutil.Error:
                pass
        assert not left, f"Ray processes left after close: {[p.pid for p in left]}"


@contextlib.contextmanager
def ray_server(state: Path, **env: str) -> Iterator[ServerProcess]:
    """`gpuyard server --backend ray` on a loopback cluster of two logical nodes of 2 GPUs
    (`env` adds settings), stopped at the end with no Ray process left behind."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    clean.update(GPUYARD_BACKEND="ray", GPUYARD_RAY_LOCAL_NODES="2x2", **env)
    proc = ServerProcess(state, "--kill-grace", "2", env=clean).start(timeout_s=120)
    try:
        yield proc
    finally:
        proc.stop()
        token = str(state / "ray_auth_token")
        left = wait_until_gone(lambda: cluster_processes(token) + ray_orphans(), timeout_s=30)
        assert not left, f"Ray processes left after the server stopped: {left}"


def ray_orphans() -> list[psutil.Process]:
    """Ray processes adopted by init (their cluster is gone): e.g. a killed raylet's agents.
    Their environment cannot be read (Ray's process titles overwrite it), so by name."""
    found = []
    for proc in psutil.process_iter(["name", "ppid", "status", "cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or ())
        if (
            proc.info["ppid"] == 1
            and proc.info["status"] != psutil.STATUS_ZOMBIE
            and (cmd.startswith("ray::") or "raylet" in cmd or "gcs_server" in cmd)
        ):
            found.append(proc)
    return found


def cluster_processes(token_path: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if proc.environ().get("RAY_AUTH_TOKEN_PATH") == token_path:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def marked_processes(marker: str) -> list[psutil.Process]:
    """Live processes whose argv contains `marker` (a job's processes, on any node)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if any(marker in arg for arg in proc.info["cmdline"] or ()):
            found.append(proc)
    return found


def wait_until_gone(
    find: Callable[[], list[psutil.Process]], timeout_s: float
) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout_s
    while True:
        left = find()
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def wait_for_text(path: Path, text: str, count: int = 1, timeout_s: float = 30) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        content = path.read_text() if path.exists() else ""
        if content.count(text) >= count:
            return content
        if time.monotonic() > deadline:
            raise AssertionError(f"{text!r} x{count} not in {path} after {timeout_s}s:\n{content}")
        time.sleep(0.05)
