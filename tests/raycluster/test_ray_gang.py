"""The Ray adapter on a real two-node local Ray cluster (CPU only; gloo for DDP).

The node-loss test kills a raylet, so it runs last (tests run in file order).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import ray

from gpuyard.adapters.ray import GangLaunchError, GangOutcome, RayConnection, launch
from tests.raycluster.conftest import marked_processes, wait_for_text, wait_until_gone

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable

# Ignores SIGTERM (so only the SIGKILL after the grace period ends it) and leaves a child
# that ignores it too: a stop must still leave nothing behind.
STUBBORN = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
subprocess.Popen([sys.executable, "-c",
    "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)",
    sys.argv[1]])
print("ready", flush=True)
time.sleep(300)
"""
SLEEPER = "import time; print('ready', flush=True); time.sleep(300)"


@pytest.fixture
def marker() -> str:
    return f"gpuyard-test-{uuid.uuid4().hex[:12]}"


def node_ids(conn: RayConnection) -> list[str]:
    """[head, other]: node rank 0 runs in this process's node, rank 1 on the other raylet."""
    return [n.node_id for n in conn.nodes() if n.alive]


def pg_state(pg_id: str) -> str:
    return str(ray.util.placement_group_table()[pg_id]["state"])


def assert_clean(marker: str, pg_id: str) -> None:
    assert not wait_until_gone(lambda: marked_processes(marker), timeout_s=10)
    assert pg_state(pg_id) == "REMOVED"


def test_local_cluster_is_loopback_only_with_token_auth(ray_cluster: RayConnection) -> None:
    nodes = ray_cluster.nodes()
    assert [(n.ip, n.gpus, n.cpus, n.alive) for n in nodes] == [("127.0.0.1", 2, 2, True)] * 2
    token_path = Path(os.environ["RAY_AUTH_TOKEN_PATH"])
    assert os.environ["RAY_AUTH_MODE"] == "token"
    assert token_path.stat().st_mode & 0o777 == 0o600
    from tests.raycluster.conftest import cluster_processes

    listening = [
        conn.laddr
        for proc in cluster_processes(str(token_path))
        for conn in proc.net_connections("inet")
        if conn.status == "LISTEN"
    ]
    assert listening and all(addr.ip in ("127.0.0.1", "::ffff:127.0.0.1") for addr in listening)
    assert ray_cluster.address.startswith("127.0.0.1:")
    # A client with a wrong token is refused (Ray retries for ~20 s; the refusal shows at once).
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="x")
    client = subprocess.Popen(
        [PY, "-c", "import ray, sys; ray.init(address=sys.argv[1]); print('CONNECTED')",
         ray_cluster.address],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert client.stdout is not None
        deadline = time.monotonic() + 30
        for line in client.stdout:
            assert "CONNECTED" not in line
            if "InvalidAuthToken" in line or time.monotonic() > deadline:
                break
        assert "InvalidAuthToken" in line
    finally:
        client.kill()
        client.wait()


def test_ddp_over_two_nodes_completes_with_one_labelled_log(
    ray_cluster: RayConnection, tmp_path: Path
) -> None:
    ids = node_ids(ray_cluster)
    log = tmp_path / "output.log"

    def torchrun(rank: int, addr: str, port: int) -> list[str]:
        return [
            PY, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=2",
            f"--node-rank={rank}", f"--master-addr={addr}", f"--master-port={port}",
            "--max-restarts=0", "examples/train_ddp.py",
            "--steps", "3", "--batch-size", "8", "--hidden", "16", "--log-every", "1",
        ]  # fmt: skip

    ended = []
    started = time.monotonic()
    handle = launch(
        1, [(ids[0], 2, 1), (ids[1], 2, 1)], torchrun, {"OMP_NUM_THREADS": "1"}, log,
        grace_s=5, time_limit_s=120, workdir=str(REPO), on_end=ended.append,
    )  # fmt: skip
    launched = time.monotonic() - started
    result = handle.wait(150)
    assert result is not None, log.read_text()
    assert result.outcome is GangOutcome.COMPLETED, log.read_text()
    assert result.exit_codes == (0, 0)
    assert ended == [result]
    assert [n.node_id for n in handle.nodes] == ids
    assert [len(n.gpu_ids) for n in handle.nodes] == [2, 2]
    assert [n.cuda_visible_devices for n in handle.nodes] == ["0,1", "0,1"]
    assert handle.master_addr == "127.0.0.1" and handle.master_port > 0
    text = log.read_text()
    ranks = re.findall(
        r"^\[node(\d)\] rank (\d)/4 local_rank (\d) world_size 4 .*"
        r"\(CUDA_VISIBLE_DEVICES='([^']*)'\)$", text, re.M,
    )  # fmt: skip
    # torchrun: global rank = node rank * 2 + local rank; every rank sees its node's 2 GPUs.
    assert sorted((int(n), int(r)) for n, r, _, _ in ranks) == [(0, 0), (0, 1), (1, 2), (1, 3)]
    assert all(int(r) == int(n) * 2 + int(lr) for n, r, lr, _ in ranks)
    assert {cvd for *_, cvd in ranks} == {"0,1"}
    assert re.search(r"^\[node0\] done: loss", text, re.M)
    assert "[gpuyard] every node exited with code 0" in text
    assert pg_state(handle.placement_group_id) == "REMOVED"
    print(f"\n2-node launch: {launched:.2f}s")


def test_a_failing_node_stops_the_other_and_is_reported(
    ray_cluster: RayConnection, tmp_path: Path, marker: str
) -> None:
    ids = node_ids(ray_cluster)
    log = tmp_path / "output.log"
    fail = "import sys, time; print('failing', flush=True); time.sleep(0.5); sys.exit(3)"

    def argv(rank: int, addr: str, port: int) -> list[str]:
        return [PY, "-c", SLEEPER if rank == 0 else fail, marker]

    handle = launch(2, [(ids[0], 1, 1), (ids[1], 1, 1)], argv, {}, log, grace_s=5)
    result = handle.wait(60)
    assert result is not None
    assert result.outcome is GangOutcome.FAILED
    assert (result.node_rank, result.node_id, result.exit_code) == (1, ids[1], 3)
    assert result.exit_codes == (-signal.SIGTERM, 3)  # node 0 stopped by SIGTERM
    text = log.read_text()
    assert "[node0] ready" in text and "[node1] failing" in text
    assert "[gpuyard] node1 (" in text and "exited with code 3" in text
    assert_clean(marker, handle.placement_group_id)


def test_cancel_kills_every_process_and_removes_the_placement_group(
    ray_cluster: RayConnection, tmp_path: Path, marker: str
) -> None:
    ids = node_ids(ray_cluster)
    log = tmp_path / "output.log"
    handle = launch(
        3, [(ids[0], 2, 2), (ids[1], 2, 2)], lambda r, a, p: [PY, "-c", STUBBORN, marker],
        {}, log, grace_s=1,
    )  # fmt: skip
    wait_for_text(log, "ready", count=2)
    assert len(marked_processes(marker)) == 4  # per node: the job and its child
    assert pg_state(handle.placement_group_id) == "CREATED"
    started = time.monotonic()
    result = handle.stop("cancelled by test", timeout=30)
    took = time.monotonic() - started
    assert result is not None and result.outcome is GangOutcome.CANCELLED
    assert result.exit_codes == (-signal.SIGKILL, -signal.SIGKILL)  # TERM ignored: KILL
    assert 1 <= took < 10
    assert handle.stop() == result  # idempotent
    assert not marked_processes(marker)  # gone when stop() returns, not later
    assert pg_state(handle.placement_group_id) == "REMOVED"
    # The bundles' GPUs go back to the nodes (Ray frees them asynchronously, within moments).
    deadline = time.monotonic() + 10
    while ray.available_resources().get("GPU") != 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ray.available_resources().get("GPU") == 4


def test_time_limit_on_one_node(ray_cluster: RayConnection, tmp_path: Path, marker: str) -> None:
    ids = node_ids(ray_cluster)
    log = tmp_path / "output.log"
    handle = launch(
        4, [(ids[1], 1, 1)], lambda r, a, p: [PY, "-c", SLEEPER, marker], {}, log,
        grace_s=2, time_limit_s=1.0,
    )  # fmt: skip
    result = handle.wait(30)
    assert result is not None and result.outcome is GangOutcome.TIMED_OUT
    assert result.exit_codes == (-signal.SIGTERM,)
    assert "[gpuyard] time limit of 1s reached" in log.read_text()
    assert_clean(marker, handle.placement_group_id)


def test_launch_on_a_missing_node_fails_and_leaves_nothing(
    ray_cluster: RayConnection, tmp_path: Path
) -> None:
    ids = node_ids(ray_cluster)
    ghost = "f" * len(ids[0])
    before = set(ray.util.placement_group_table())
    with pytest.raises(GangLaunchError) as err:
        launch(
            5, [(ids[0], 1, 1), (ghost, 1, 1)], lambda r, a, p: [PY, "-c", "pass"], {},
            tmp_path / "output.log", ready_timeout_s=1.0,
        )  # fmt: skip
    assert err.value.node_id == ghost
    created = set(ray.util.placement_group_table()) - before
    assert created and all(pg_state(pg) == "REMOVED" for pg in created)


def test_a_dead_node_actor_counts_as_lost_and_its_supervisor_stops_the_command(
    ray_cluster: RayConnection, tmp_path: Path, marker: str
) -> None:
    """The Ray worker holding node 1's actor dies (OOM killer, say); its raylet lives on."""
    ids = node_ids(ray_cluster)
    log = tmp_path / "output.log"
    handle = launch(
        6, [(ids[0], 1, 1), (ids[1], 1, 1)], lambda r, a, p: [PY, "-c", SLEEPER, marker],
        {}, log, grace_s=1,
    )  # fmt: skip
    wait_for_text(log, "ready", count=2)
    os.kill(handle.nodes[1].worker_pid, signal.SIGKILL)
    result = handle.wait(60)
    assert result is not None
    assert result.outcome is GangOutcome.NODE_LOST, log.read_text()
    assert (result.node_rank, result.node_id, result.node_alive) == (1, ids[1], True)
    assert result.exit_codes == (-signal.SIGTERM, None)
    assert "its actor died (ActorDiedError)" in log.read_text()
    assert_clean(marker, handle.placement_group_id)  # node 1's supervisor saw its actor go


def test_losing_a_node_is_reported_and_stops_the_rest(
    ray_cluster: RayConnection, tmp_path: Path, marker: str
) -> None:
    """Last: it kills the second node's raylet."""
    ids = node_ids(ray_cluster)
    log = tmp_path / "output.log"
    handle = launch(
        7, [(ids[0], 2, 1), (ids[1], 2, 1)], lambda r, a, p: [PY, "-c", SLEEPER, marker],
        {}, log, grace_s=2,
    )  # fmt: skip
    wait_for_text(log, "ready", count=2)
    os.kill(ray_cluster.local_raylet_pids()[ids[1]], signal.SIGKILL)
    result = handle.wait(60)
    assert result is not None
    assert result.outcome is GangOutcome.NODE_LOST, log.read_text()
    assert (result.node_rank, result.node_id, result.node_alive) == (1, ids[1], False)
    assert result.exit_codes[0] == -signal.SIGTERM  # the surviving node was stopped
    assert "lost node1 (" in log.read_text()
    deadline = time.monotonic() + 10  # GCS marks it dead after its health checks fail
    while [n.alive for n in ray_cluster.nodes()] != [True, False]:
        assert time.monotonic() < deadline, ray_cluster.nodes()
        time.sleep(0.1)
    # The lost node's own process is stopped by its supervisor once its Ray worker is gone.
    assert_clean(marker, handle.placement_group_id)


def test_the_session_folder_is_the_servers_alone(ray_cluster: RayConnection) -> None:
    """Not Ray's world-writable /tmp/ray: a 0700 folder of the server's holds the session
    (sockets, logs) of every local node, the extra raylet's too (issue 11)."""
    import stat

    import psutil

    root = ray_cluster.temp_root
    assert root is not None and stat.S_IMODE(root.stat().st_mode) == 0o700
    session = Path(ray._private.worker.global_worker.node.get_session_dir_path())
    assert root in session.parents
    token_path = os.environ["RAY_AUTH_TOKEN_PATH"]
    raylets = []
    for proc in psutil.process_iter(["cmdline", "environ"]):
        try:
            if (proc.info["environ"] or {}).get("RAY_AUTH_TOKEN_PATH") != token_path:
                continue
        except psutil.Error:
            continue
        cmdline = " ".join(proc.info["cmdline"] or [])
        assert "/tmp/ray/" not in cmdline, cmdline
        if "raylet" in (proc.info["cmdline"] or [""])[0]:
            raylets.append(cmdline)
    # The head's raylet at least (a test before may have killed the extra one).
    assert raylets and all(str(root) in line for line in raylets), raylets
    for node in ray_cluster._local_nodes:  # the extra raylets' sessions: the same folder
        assert root in Path(node.get_session_dir_path()).parents
