"""Machines join a running server (issue 21): a cluster as a lab runs one, a Ray head and
workers started with `ray start`, the server connected by address with the cluster's token.
Each machine has its own fake NVML GPUs (distinct names and UUIDs) and its own job folder.

A job waits for GPUs while every machine's are taken; a machine joins and its GPUs take the
job, with no restart. Two machines join in the order of names that sort the other way: a
restarted server keeps every GPU's number (the running job's GPUs are the same GPUs after the
restart), and a machine that is away when the server starts is waited for, not failed: its job
goes on when it is back.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.e2e.server import BIN, ServerProcess, free_port, wait_for
from tests.fakenvml import build_fake_nvml, fake_nvml_env, gcc_path, write_fake_nvml_state
from tests.raycluster.conftest import cluster_processes, ray_orphans, wait_until_gone

pytestmark = pytest.mark.skipif(gcc_path() is None, reason="gcc is needed to build fake NVML")

HEAD_GPUS = [("NVIDIA H100 80GB HBM3", 81559, f"GPU-d0d0d0d0-0000-0000-0000-00000000000{i}")
             for i in range(2)]  # fmt: skip
LATE = {  # machine name -> its GPUs; "gy-zeta" joins first, "gy-alpha" second
    "gy-zeta": [("NVIDIA A100-SXM4-40GB", 40960, f"GPU-e1e1e1e1-0000-0000-0000-00000000000{i}")
                for i in range(2)],
    "gy-alpha": [("NVIDIA L40S", 46068, f"GPU-f2f2f2f2-0000-0000-0000-00000000000{i}")
                 for i in range(2)],
}  # fmt: skip


def _host_ip() -> str:
    """The address Ray binds (it resolves loopback to it): a lab's machines use theirs."""
    from ray._private.services import get_node_ip_address

    return str(get_node_ip_address())


class RayNodeProcess:
    """One `ray start --block` of this test (a head or a worker), stopped by its own group."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.args, self.env, self.log = args, env, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> RayNodeProcess:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [str(BIN / "ray"), "start", "--block", "--disable-usage-stats", *self.args],
                env=self.env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        return self

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)  # `ray start --block` stops its processes
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


class Lab:
    """The head (with the server's own machine's GPUs), the server, and late machines."""

    def __init__(self, place: Path, lib: Path) -> None:
        self.place, self.lib = place, lib
        self.ip, self.port = _host_ip(), free_port()
        self.token = place / "ray-token"
        self.token.write_text(secrets.token_hex(32))
        self.token.chmod(0o600)
        self.ray_env = {
            k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "GPUYARD_"))
        }
        # A stopped `ray start --block` drains its node first, 30 s by default: none here.
        self.ray_env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(self.token),
                            RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S="0")  # fmt: skip
        self.nodes: dict[str, RayNodeProcess] = {}
        self.server: ServerProcess | None = None

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"

    def start_head(self) -> None:
        head = RayNodeProcess(
            ["--head", f"--node-ip-address={self.ip}", f"--port={self.port}", "--num-cpus=4",
             "--num-gpus=2", "--node-name=gy-head", "--include-dashboard=false",
             f"--temp-dir={self.place / 'ray'}"],
            self.ray_env, self.place / "ray-head.log",
        )  # fmt: skip
        self.nodes["gy-head"] = head.start()
        wait_for(lambda: _reachable(self.ip, self.port), timeout_s=120, interval_s=0.2)

    def start_server(self, **settings: str) -> ServerProcess:
        """The server (`settings`: more GPUYARD_* variables), on the head's machine."""
        env = fake_nvml_env(self.lib, gpus=HEAD_GPUS, state=str(self.place / "nvml-head"))
        env = {k: v for k, v in env.items() if not k.startswith(("RAY_", "GPUYARD_"))}
        env.update(
            GPUYARD_BACKEND="ray", GPUYARD_RAY_ADDRESS=self.address,
            GPUYARD_RAY_TOKEN_FILE=str(self.token), GPUYARD_TELEMETRY_S="0.5",
            GPUYARD_MACHINE_GRACE_S="120",
        )  # fmt: skip
        env.update(settings)
        if self.server is None:
            self.server = ServerProcess(self.place / "state", "--kill-grace", "2", env=env)
        return self.server.start(timeout_s=240)

    def join(self, name: str, gpus: list[tuple[str, int, str]] | None = None) -> None:
        """A machine joins: its raylet (and so its agent and jobs) sees its own fake GPUs
        (`gpus`, else LATE's) and its own agent folder."""
        state = self.place / f"nvml-{name}"
        if not state.exists():
            write_fake_nvml_state(state, {})
        env = fake_nvml_env(self.lib, gpus=gpus or LATE[name], state=str(state))
        env = {k: v for k, v in env.items() if not k.startswith(("RAY_", "GPUYARD_"))}
        env.update(self.ray_env, GPUYARD_AGENT_DIR=str(self.place / f"agent-{name}"))
        node = RayNodeProcess(
            [f"--address={self.address}", f"--node-ip-address={self.ip}", "--num-cpus=4",
             "--num-gpus=2", f"--node-name={name}"],
            env, self.place / f"ray-{name}.log",
        )  # fmt: skip
        self.nodes[name] = node.start()

    def restart_head(self) -> None:
        """The Ray head stopped and started again on its address (its GCS state is lost, as
        without Ray's GCS fault tolerance: every machine joins it again)."""
        self.nodes.pop("gy-head").stop()
        self.start_head()

    def leave(self, name: str) -> None:
        self.nodes.pop(name).stop()

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server.kill_jobs()
        for name in [n for n in self.nodes if n != "gy-head"] + ["gy-head"]:
            if name in self.nodes:
                self.nodes.pop(name).stop()
        _kill_jobs_under(self.place)


def _reachable(ip: str, port: int) -> bool:
    try:
        socket.create_connection((ip, port), timeout=1).close()
        return True
    except OSError:
        return False


def _kill_jobs_under(place: Path) -> None:
    """Every supervisor (and its tree) of the machines' agent folders."""
    for proc in psutil.process_iter(["cmdline"]):
        if any(arg.startswith(str(place)) for arg in proc.info["cmdline"] or ()):
            for each in [*proc.children(recursive=True), proc]:
                try:
                    each.kill()
                except psutil.Error:
                    pass


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    place = Path(tempfile.mkdtemp(prefix="gyjoin-"))
    place.chmod(0o755)
    made = Lab(place, build_fake_nvml(tmp_path_factory.mktemp("nvml")))
    write_fake_nvml_state(place / "nvml-head", {})
    try:
        made.start_head()
        made.start_server()
        yield made
    finally:
        made.close()
        token = str(made.token)
        left = wait_until_gone(lambda: cluster_processes(token) + ray_orphans(), timeout_s=30)
        for proc in left:
            try:
                proc.kill()
            except psutil.Error:
                pass
        shutil.rmtree(place, ignore_errors=True)
        assert not left, f"Ray processes left: {[p.pid for p in left]}"


def _job(server: ServerProcess, job_id: int) -> dict[str, Any]:
    return json.loads(server.cli("show", str(job_id), "--json").stdout)  # type: ignore[no-any-return]


def _nodes(server: ServerProcess) -> dict[str, dict[str, Any]]:
    return {n["name"]: n for n in json.loads(server.cli("nodes", "--json").stdout)}


def _gpus(server: ServerProcess) -> dict[int, dict[str, Any]]:
    return {g["index"]: g for g in json.loads(server.cli("gpus", "--json").stdout)}


def _until_finished(lab: Lab, flag: Path) -> str:
    return (
        f'echo "gpus $CUDA_VISIBLE_DEVICES"; while [ ! -e {flag} ]; do sleep 0.3; done; echo done'
    )


def test_a_machine_that_joins_takes_a_waiting_job_without_a_restart(lab: Lab) -> None:
    server = lab.server
    assert server is not None
    assert list(_nodes(server)) == ["gy-head"]
    flag = lab.place / f"finish-{uuid.uuid4().hex[:8]}"
    submit = ("submit", "--gpus", "2", "--", "sh", "-c", _until_finished(lab, flag))
    holder = int(server.cli(*submit).stdout)  # the head's two GPUs
    wait_for(lambda: _job(server, holder)["state"] == "RUNNING", timeout_s=120, interval_s=0.2)
    job_id = int(server.cli(*submit).stdout)
    assert _job(server, job_id)["state"] == "PENDING"
    joined_at = time.monotonic()
    lab.join("gy-zeta")
    job = wait_for(lambda: (j := _job(server, job_id))["state"] == "RUNNING" and j,
                   timeout_s=180, interval_s=0.2)  # fmt: skip
    took = time.monotonic() - joined_at
    assert job["node"] == "gy-zeta" and job["gpus"] == [2, 3], job
    nodes = _nodes(server)
    assert nodes["gy-zeta"]["gpus"] == 2 and "A100" in json.dumps(nodes["gy-zeta"]["gpu_types"])
    gpus = _gpus(server)
    assert [gpus[i]["uuid"] for i in (2, 3)] == [g[2] for g in LATE["gy-zeta"]]
    wait_for(lambda: "gpus 0,1" in server.client().log(job_id).decode(), timeout_s=60)
    events = server.client()._json("GET", "/api/v1/events")  # what the events page shows
    assert any(e["kind"] == "node_join" and "gy-zeta" in e["message"] for e in events)
    print(f"join to first job running: {took:.1f} s")
    flag.touch()
    for each in (holder, job_id):
        ended = wait_for(lambda e=each: (j := _job(server, e))["state"] != "RUNNING" and j,
                         timeout_s=120, interval_s=0.2)  # fmt: skip
        assert ended["state"] == "COMPLETED", ended


def test_gpu_numbers_hold_across_a_cluster_restart_and_a_machine_away_is_waited_for(
    lab: Lab,
) -> None:
    server = lab.server
    assert server is not None
    lab.join("gy-alpha")  # joins after gy-zeta, sorts before it
    wait_for(lambda: "gy-alpha" in _nodes(server), timeout_s=180, interval_s=0.3)
    assert [g["node"] for _, g in sorted(_gpus(server).items())] == (
        ["gy-head"] * 2 + ["gy-zeta"] * 2 + ["gy-alpha"] * 2
    )
    flag = lab.place / f"finish-{uuid.uuid4().hex[:8]}"
    job_id = int(server.cli("submit", "--gpus", "2", "--gpu-type", "l40s", "--",
                            "sh", "-c", _until_finished(lab, flag)).stdout)  # fmt: skip
    job = wait_for(lambda: (j := _job(server, job_id))["state"] == "RUNNING" and j,
                   timeout_s=120, interval_s=0.2)  # fmt: skip
    assert job["node"] == "gy-alpha" and job["gpus"] == [4, 5]

    # The whole cluster restarts (the Ray head too, as a reboot of the head machine would):
    # the server, the head and gy-zeta come back first; gy-alpha, whose job runs on under its
    # supervisor (not Ray's), later.
    server.stop()
    lab.leave("gy-alpha")
    lab.leave("gy-zeta")
    lab.restart_head()
    lab.join("gy-zeta")
    server.start(timeout_s=240)
    gpus = _gpus(server)
    assert [gpus[i]["uuid"] for i in (4, 5)] == [g[2] for g in LATE["gy-alpha"]]  # not renumbered
    assert gpus[4]["drained"] and gpus[2]["uuid"] == LATE["gy-zeta"][0][2]
    assert _job(server, job_id)["state"] == "RUNNING"  # waited for, within the grace
    assert _nodes(server)["gy-alpha"]["state"] == "down"

    lab.join("gy-alpha")  # back: its agent re-adopts the job, its GPUs return to service
    wait_for(lambda: not _gpus(server)[4]["drained"], timeout_s=180, interval_s=0.3)
    wait_for(lambda: "gy-zeta" in _nodes(server) and _nodes(server)["gy-zeta"]["state"] != "down",
             timeout_s=180, interval_s=0.3)  # fmt: skip
    flag.touch()
    ended = wait_for(lambda: (j := _job(server, job_id))["state"] != "RUNNING" and j,
                     timeout_s=120, interval_s=0.2)  # fmt: skip
    assert ended["state"] == "COMPLETED" and ended["gpus"] == [4, 5], ended
    assert "done" in server.client().log(job_id).decode()


def test_a_machine_away_past_the_grace_ends_its_job_node_fail_and_is_fenced_when_back(
    lab: Lab,
) -> None:
    server = lab.server
    assert server is not None
    flag = lab.place / f"finish-{uuid.uuid4().hex[:8]}"
    pids = lab.place / f"pids-{uuid.uuid4().hex[:8]}"
    script = (  # each run counts itself in its checkpoint dir (the machine's own folder)
        f'echo $$ >> {pids}; echo run >> "$GPUYARD_CHECKPOINT_DIR/runs"; '
        'echo "run $(wc -l < "$GPUYARD_CHECKPOINT_DIR/runs") from its checkpoint dir"; '
        + _until_finished(lab, flag)
    )
    job_id = int(server.cli("submit", "--gpus", "2", "--gpu-type", "a100", "--",
                            "sh", "-c", script).stdout)  # fmt: skip
    job = wait_for(lambda: (j := _job(server, job_id))["state"] == "RUNNING" and j,
                   timeout_s=120, interval_s=0.2)  # fmt: skip
    assert job["node"] == "gy-zeta"
    first = int(wait_for(lambda: pids.exists() and pids.read_text().split(), timeout_s=60)[0])

    server.stop()
    lab.leave("gy-zeta")
    server.env["GPUYARD_MACHINE_GRACE_S"] = "3"
    try:
        server.start(timeout_s=240)
        requeued = wait_for(lambda: (j := _job(server, job_id))["attempts"] and j,
                            timeout_s=60, interval_s=0.3)  # fmt: skip
    finally:
        server.env["GPUYARD_MACHINE_GRACE_S"] = "120"
    assert requeued["state"] == "PENDING", requeued  # only gy-zeta has A100s
    assert requeued["attempts"][0]["state"] == "NODE_FAIL"
    assert "gy-zeta" in requeued["attempts"][0]["reason"]
    assert psutil.pid_exists(first)  # its machine is away: nobody could stop it there

    lab.join("gy-zeta")  # back: what it still runs is ended before its GPUs take the job again
    again = wait_for(lambda: (j := _job(server, job_id))["state"] == "RUNNING" and j,
                     timeout_s=180, interval_s=0.2)  # fmt: skip
    assert again["node"] == "gy-zeta"
    assert not psutil.pid_exists(first) or psutil.Process(first).status() == psutil.STATUS_ZOMBIE
    flag.touch()
    ended = wait_for(lambda: (j := _job(server, job_id))["state"] != "RUNNING" and j,
                     timeout_s=120, interval_s=0.2)  # fmt: skip
    assert ended["state"] == "COMPLETED", ended
    log = server.client().log(job_id).decode()
    assert "run 2 from its checkpoint dir" in log, log[-2000:]  # resumed from the first's
