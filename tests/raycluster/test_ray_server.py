"""`gpuyard server --backend ray` end to end: the server starts a loopback-only Ray cluster of
two logical nodes of 2 GPUs each (this machine), and the real CLI submits multi-node jobs.

One server for the module (starting Ray takes seconds): a 2-node torchrun job trains with world
size 4, a cancel leaves no process, and losing a node (its raylet killed) ends the job on it
NODE_FAIL and takes that node's GPUs out of service; its part of the job is ended when the
machine is back (fencing). The node-loss test runs last.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.e2e.server import ServerProcess, wait_for
from tests.raycluster.conftest import marked_processes, ray_server, wait_until_gone

REPO = Path(__file__).resolve().parents[2]
DDP = str(REPO / "examples" / "train_ddp.py")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    state = tmp_path_factory.mktemp("ray-server") / "state"
    with ray_server(state, GPUYARD_RAY_NODE_TIMEOUT_S="1.5") as proc:
        yield proc


def _job(server: ServerProcess, job_id: int) -> dict:  # type: ignore[type-arg]
    return json.loads(server.cli("show", str(job_id), "--json").stdout)  # type: ignore[no-any-return]


def _ended(server: ServerProcess, job_id: int, timeout_s: float = 120) -> dict:  # type: ignore[type-arg]
    return wait_for(  # type: ignore[no-any-return]
        lambda: (j := _job(server, job_id))["state"] not in ("PENDING", "RUNNING") and j,
        timeout_s=timeout_s, interval_s=0.3,
    )  # fmt: skip


def test_the_inventory_is_rays_two_nodes_with_their_gpus(server: ServerProcess) -> None:
    gpus = json.loads(server.cli("gpus", "--json").stdout)
    assert [(g["index"], g["node"]) for g in gpus] == [
        (0, "gpuyard-local-0"), (1, "gpuyard-local-0"),
        (2, "gpuyard-local-1"), (3, "gpuyard-local-1"),
    ]  # fmt: skip
    assert "NODE" in server.cli("gpus").stdout.splitlines()[0]


def test_a_two_node_torchrun_job_trains_with_world_size_four(server: ServerProcess) -> None:
    out = server.cli(
        "submit", "--nodes", "2", "--gpus-per-node", "2", "--distributed", "torchrun", "--",
        sys.executable, DDP, "--steps", "30", "--log-every", "10",
    )  # fmt: skip
    job_id = int(out.stdout)
    job = _ended(server, job_id)
    log = server.client().log(job_id).decode()
    assert job["state"] == "COMPLETED", log[-3000:]
    assert job["node"] == "gpuyard-local-0,gpuyard-local-1" and job["nodes"] == 2
    ranks = re.findall(
        r"^\[node(\d)\] \[rank(\d)\] rank \2/4 local_rank \d world_size 4 .*"
        r"\(CUDA_VISIBLE_DEVICES='(\d,\d)'\)", log, re.MULTILINE,
    )  # fmt: skip
    assert sorted(rank for _, rank, _ in ranks) == ["0", "1", "2", "3"], log[-3000:]
    assert {node for node, _, _ in ranks} == {"0", "1"}
    assert all(len(visible.split(",")) == 2 for _, _, visible in ranks)
    first, last = map(float, re.search(r"done: loss (\S+) -> (\S+);", log).groups())  # type: ignore[union-attr]
    assert last < first
    assert "gpuyard-local-0,gpuyard-local-1" in server.cli("queue", "--all").stdout


def test_cancel_stops_every_node_and_leaves_no_process(server: ServerProcess) -> None:
    # `sleep 300; :` keeps `sh`, whose command line holds the marker, alive on each node (a
    # node's supervisor names only its folder).
    marker = f"gpuyard-ray-cancel-{uuid.uuid4().hex[:8]}"
    out = server.cli("submit", "--nodes", "2", "--gpus-per-node", "1", "--",
                     "sh", "-c", f"echo {marker}; sleep 300; :", marker)  # fmt: skip
    job_id = int(out.stdout)
    wait_for(lambda: len(marked_processes(marker)) >= 2, timeout_s=60)
    server.cli("cancel", str(job_id))
    assert _ended(server, job_id)["state"] == "CANCELLED"
    assert wait_until_gone(lambda: marked_processes(marker), timeout_s=30) == []


def test_jobs_never_see_the_clusters_token(server: ServerProcess) -> None:
    script = "env | grep '^RAY_AUTH' || echo no-ray-auth-here"
    job_id = int(server.cli("submit", "--gpus", "1", "--", "sh", "-c", script).stdout)
    assert _ended(server, job_id)["state"] == "COMPLETED"
    log = server.client().log(job_id).decode()
    assert "no-ray-auth-here" in log and "RAY_AUTH_TOKEN" not in log


def test_gpu_sharing_on_ray_follows_the_one_box_rules(server: ServerProcess) -> None:
    """gpuyard binds each machine's GPUs itself (its agent), so `--gpu-mem` is refused only
    for what a one-box server refuses it for: declared GPUs of unknown memory (shared GPUs on
    detected ones: test_ray_machines.py)."""
    out = server.cli("submit", "--gpu-mem", "8G", "--", "true", check=False)
    assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1
    assert "does not know its GPUs' memory" in out.stderr
    assert "Ray" not in out.stderr


def test_a_bad_node_request_is_one_line(server: ServerProcess) -> None:
    out = server.cli("submit", "--nodes", "3", "--gpus-per-node", "1", "--", "true", check=False)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        "gpuyard: the job asks for 3 nodes but this server has 2 (multi-node jobs need "
        "`gpuyard server --backend ray` on a cluster)"
    ]
    # CPUs are checked per machine: 4 over 2 machines fit nodes of 2 CPUs, 6 do not.
    args = ("--nodes", "2", "--gpus-per-node", "1")
    fits = server.cli("submit", "--dry-run", *args, "--cpus", "4", "--", "true", check=False)
    assert fits.returncode == 0, fits.stderr
    big = server.cli("submit", *args, "--cpus", "6", "--", "true", check=False)
    assert big.returncode == 1
    assert "asks for 3 CPUs per machine but this server offers 2" in big.stderr


def test_a_failing_node_stops_the_other_and_the_reason_names_it(server: ServerProcess) -> None:
    marker = f"gpuyard-ray-fail-{uuid.uuid4().hex[:8]}"
    script = f'[ "$GPUYARD_NODE_RANK" = 1 ] && {{ sleep 1; exit 3; }}; sleep 300; : # {marker}'
    job_id = int(server.cli("submit", "--nodes", "2", "--gpus-per-node", "1", "--",
                            "sh", "-c", script).stdout)  # fmt: skip
    job = _ended(server, job_id, timeout_s=60)
    assert job["state"] == "FAILED", job
    assert job["reason"].startswith("NodeFailed: node1 ") and "exited with code 3" in job["reason"]
    assert job["exit_code"] == 3
    assert wait_until_gone(lambda: marked_processes(marker), timeout_s=30) == []


def test_losing_a_node_requeues_its_job_node_fail_and_drains_its_gpus(
    server: ServerProcess,
) -> None:
    """Last: it kills the second node's raylet (and restarts the server). The job's run ends
    NODE_FAIL and the job is requeued (the server's node-failure requeues), waiting for two
    machines again."""
    marker = f"gpuyard-ray-lost-{uuid.uuid4().hex[:8]}"
    out = server.cli("submit", "--nodes", "2", "--gpus-per-node", "2", "--",
                     "sh", "-c", f"echo {marker}; sleep 300; :", marker)  # fmt: skip
    job_id = int(out.stdout)
    wait_for(lambda: len(marked_processes(marker)) >= 2, timeout_s=60)
    raylets = [
        p for p in psutil.process_iter(["cmdline"])
        if any("raylet" in a for a in (p.info["cmdline"] or ())[:1])
        and any("gpuyard-local-1" in a for a in p.info["cmdline"] or ())
    ]  # fmt: skip
    assert len(raylets) == 1, raylets
    os.kill(raylets[0].pid, signal.SIGKILL)

    job = wait_for(lambda: (j := _job(server, job_id))["attempts"] and j, timeout_s=60)
    assert job["state"] == "PENDING", job
    run = job["attempts"][0]  # (a relaunch before the machine's drain would fail NODE_FAIL too)
    assert run["state"] == "NODE_FAIL", run
    assert "gpuyard-local-1" in run["reason"] or "node1" in run["reason"], run["reason"]
    # The server's own machine's part is stopped; the lost machine's part runs on under its
    # supervisor (jobs outlive their agent) until that machine is back and fences it.
    wait_for(lambda: len(marked_processes(marker)) == 1, timeout_s=30)
    machines = {n["name"]: n for n in json.loads(server.cli("nodes", "--json").stdout)}
    assert machines["gpuyard-local-1"]["state"] == "down", machines
    assert machines["gpuyard-local-0"]["state"] != "down"
    server.cli("cancel", str(job_id))  # it would wait for a second machine

    def lost_gpus_drained() -> list[dict] | None:  # type: ignore[type-arg]
        found = json.loads(server.cli("gpus", "--json").stdout)  # drained one after the other
        return found if found[2]["drained"] and found[3]["drained"] else None

    gpus = wait_for(lost_gpus_drained, timeout_s=30)
    assert [g["drained"] for g in gpus] == [False, False, True, True]
    assert "Ray node gpuyard-local-1 was lost" in gpus[2]["drain_reason"]
    # The surviving node still runs work.
    alone = int(server.cli("submit", "--gpus", "2", "--", "true").stdout)
    assert _ended(server, alone)["state"] == "COMPLETED"
    assert _job(server, alone)["node"] == "gpuyard-local-0"

    # A restarted server starts with the machines alive then: the lost one's drains are lifted,
    # and the job the lost machine still ran is ended there before its GPUs are used again.
    server.stop()
    server.start(timeout_s=240)
    assert wait_until_gone(lambda: marked_processes(marker), timeout_s=30) == []
    gpus = json.loads(server.cli("gpus", "--json").stdout)
    assert [(g["node"], g["drained"]) for g in gpus] == [
        ("gpuyard-local-0", False), ("gpuyard-local-0", False),
        ("gpuyard-local-1", False), ("gpuyard-local-1", False),
    ]  # fmt: skip
    spread = int(server.cli("submit", "--nodes", "2", "--gpus-per-node", "2", "--", "true").stdout)
    assert _ended(server, spread)["state"] == "COMPLETED"
