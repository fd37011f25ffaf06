"""Every machine of a Ray cluster is a full gpuyard machine (issue 21): a cluster of three
"machines" on this one (the server's own and two more raylets), each with its own fake NVML
GPUs (distinct names, UUIDs and state file) and its own job folder, so none sees another's
state. Real Unix users through the server's Unix socket, real cgroups, real supervisors.

One server for the module (a Ray cluster takes seconds to start); the tests that restart the
server or lose a machine run last.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
import pytest

from tests.e2e.server import ServerProcess, wait_for
from tests.e2e.test_local_socket import as_user, call
from tests.e2e.test_run_pty import Terminal
from tests.e2e.test_services import SERVICE
from tests.e2e.unix_users import UnixUsers, unix_users
from tests.fakenvml import build_fake_nvml, fake_nvml_env, gcc_path, write_fake_nvml_state
from tests.raycluster.conftest import (
    cluster_processes,
    marked_processes,
    ray_orphans,
    wait_until_gone,
)
from tests.web.rig import login

if TYPE_CHECKING:
    from playwright.sync_api import Browser

pytestmark = pytest.mark.skipif(gcc_path() is None, reason="gcc is needed to build fake NVML")

MACHINES = ("gpuyard-local-0", "gpuyard-local-1", "gpuyard-local-2")
GPUS = {
    0: [("NVIDIA H100 80GB HBM3", 81559, f"GPU-a0a0a0a0-0000-0000-0000-00000000000{i}")
        for i in range(2)],
    1: [("NVIDIA A100-SXM4-40GB", 40960, f"GPU-b1b1b1b1-0000-0000-0000-00000000000{i}")
        for i in range(2)],
    2: [("NVIDIA L40S", 46068, f"GPU-c2c2c2c2-0000-0000-0000-00000000000{i}") for i in range(2)],
}  # fmt: skip
DRIVERS = {0: "560.35.03", 1: "550.54.15", 2: "535.104.05"}  # each machine's own NVIDIA driver


@pytest.fixture(scope="module")
def place() -> Iterator[Path]:
    """A folder every user may traverse (pytest's tmp is root's alone): state dir, socket."""
    folder = Path(tempfile.mkdtemp(prefix="gyray-"))
    folder.chmod(0o755)
    yield folder
    if not os.environ.get("GYRAY_KEEP"):
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def users() -> Iterator[UnixUsers]:
    with unix_users() as made:
        yield made


def _state_file(place: Path, machine: int) -> Path:
    return place / f"nvml-state-{machine}"


@pytest.fixture(scope="module")
def server(place: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    lib = build_fake_nvml(tmp_path_factory.mktemp("nvml"))
    for machine in GPUS:
        write_fake_nvml_state(_state_file(place, machine), {})
    base = fake_nvml_env(lib, gpus=GPUS[0], state=str(_state_file(place, 0)),
                         driver_version=DRIVERS[0])  # fmt: skip
    node_env = {
        str(m): {k: v for k, v in fake_nvml_env(lib, gpus=GPUS[m], driver_version=DRIVERS[m],
                                                state=str(_state_file(place, m))).items()
                 if k.startswith("FAKE_NVML_") or k == "LD_LIBRARY_PATH"}
        for m in (1, 2)
    }  # fmt: skip
    env = {k: v for k, v in base.items() if not k.startswith(("RAY_", "GPUYARD_"))}
    env.update(
        GPUYARD_BACKEND="ray", GPUYARD_RAY_LOCAL_NODES="3x2x4",
        GPUYARD_RAY_LOCAL_NODE_ENV=json.dumps(node_env), GPUYARD_RAY_NODE_TIMEOUT_S="2",
        GPUYARD_TELEMETRY_S="0.5", GPUYARD_SERVICE_CHECK_S="0.5",
        GPUYARD_ALLOW_ROOT_DASHBOARD="1",  # the GPUs page's test
    )  # fmt: skip
    proc = ServerProcess(
        place / "state", "--kill-grace", "2", "--socket", str(place / "run" / "gpuyard.sock"),
        env=env,
    ).start(timeout_s=240)  # fmt: skip
    try:
        yield proc
    finally:
        proc.stop()
        proc.kill_jobs()
        token = str(place / "state" / "ray_auth_token")
        left = wait_until_gone(lambda: cluster_processes(token) + ray_orphans(), timeout_s=30)
        assert not left, f"Ray processes left after the server stopped: {left}"


def _job(server: ServerProcess, job_id: int) -> dict[str, Any]:
    return json.loads(server.cli("show", str(job_id), "--json").stdout)  # type: ignore[no-any-return]


def _ended(server: ServerProcess, job_id: int, timeout_s: float = 180) -> dict[str, Any]:
    return wait_for(  # type: ignore[no-any-return]
        lambda: (j := _job(server, job_id))["state"] not in ("PENDING", "RUNNING") and j,
        timeout_s=timeout_s, interval_s=0.3,
    )  # fmt: skip


def _submit_as(server: ServerProcess, user: str, body: dict[str, Any]) -> int:
    sock = server.state_dir.parent / "run" / "gpuyard.sock"
    status, answer = as_user(user, call(sock, "POST", "/api/v1/jobs", body))
    assert status == 201, answer
    return int(answer["id"])


def test_each_machine_reports_its_own_detected_gpus(server: ServerProcess) -> None:
    gpus = json.loads(server.cli("gpus", "--json").stdout)
    got = [(g["index"], g["node"], g["name"], g["uuid"], g["detected"]) for g in gpus]
    want = [
        (2 * m + i, MACHINES[m], name, gpu_uuid, True)
        for m in range(3) for i, (name, _, gpu_uuid) in enumerate(GPUS[m])
    ]  # fmt: skip
    assert got == want


def test_nodes_lists_every_machine_and_an_admin_drains_a_whole_one(server: ServerProcess) -> None:
    def nodes() -> dict[str, dict[str, Any]]:
        return {n["name"]: n for n in json.loads(server.cli("nodes", "--json").stdout)}

    listed = nodes()
    assert list(listed) == list(MACHINES)
    for m, name in enumerate(MACHINES):
        node = listed[name]
        assert (node["state"], node["gpus"], node["gpu_types"]) == ("idle", 2, [GPUS[m][0][0]])
        assert node["agent_version"] and node["cpus"] == 4
    assert "gpuyard-local-2" in server.cli("nodes").stdout
    out = server.cli("admin", "drain", MACHINES[2], "--reason", "maintenance").stdout
    assert out.count("drained") == 2
    assert nodes()[MACHINES[2]]["state"] == "drain"
    server.cli("admin", "resume", MACHINES[2])
    assert nodes()[MACHINES[2]]["state"] == "idle"
    unknown = server.cli("admin", "drain", "no-such-machine", check=False)
    assert unknown.returncode != 0 and "no GPU or machine named" in unknown.stderr


def test_doctor_checks_each_machine_on_that_machine(server: ServerProcess) -> None:
    every = server.cli("doctor", "--all", "--json", check=False, timeout_s=300)
    nodes = json.loads(every.stdout)["nodes"]
    assert [n["node"] for n in nodes] == list(MACHINES), every.stderr
    for m, node in enumerate(nodes):  # each machine's own driver and GPUs, read there
        assert (node["summary"]["driver"], node["summary"]["gpus"]) == (DRIVERS[m], 2), node
        gpus = [c["message"] for c in node["checks"] if c["name"] == "gpu 0-1"]
        assert gpus and gpus[0].startswith(GPUS[m][0][0]), node["checks"]
        disk = next(c["message"] for c in node["checks"] if c["name"] == "state dir disk")
        if m:  # another machine's agent checks its own folder, not the server's state dir
            assert f"machines/{MACHINES[m]}" in disk, disk
    one = server.cli("doctor", "--node", MACHINES[2], check=False, timeout_s=300)
    assert one.stdout.splitlines()[0] == f"machine {MACHINES[2]}:", one.stderr
    assert f"driver {DRIVERS[2]}, 2 GPU(s)" in one.stdout
    unknown = server.cli("doctor", "--node", "no-such-machine", check=False)
    assert unknown.returncode == 1 and "`gpuyard nodes`" in unknown.stderr


def test_telemetry_is_read_from_every_machine(server: ServerProcess, place: Path) -> None:
    for machine in range(3):
        write_fake_nvml_state(_state_file(place, machine),
                              {0: {"util_gpu": 10 + machine, "temp_c": 40 + machine}})  # fmt: skip

    def readings() -> dict[int, Any] | None:
        gpus = {g["index"]: g for g in json.loads(server.cli("gpus", "--json").stdout)}
        seen = {i: gpus[i].get("util_pct") for i in (0, 2, 4)}
        return seen if seen == {0: 10, 2: 11, 4: 12} else None

    assert wait_for(readings, timeout_s=30, interval_s=0.5)
    # /metrics: each machine's GPU under its own Hostname and its number there, as that
    # machine's dcgm-exporter labels it.
    token = (server.state_dir / "metrics-token").read_text().strip()
    request = urllib.request.Request(f"{server.url}/metrics",
                                     headers={"Authorization": f"Bearer {token}"})  # fmt: skip
    text = urllib.request.urlopen(request, timeout=10).read().decode()
    for machine in range(3):
        line = next(
            line
            for line in text.splitlines()
            if line.startswith("DCGM_FI_DEV_GPU_UTIL{")
            and f'Hostname="{MACHINES[machine]}"' in line
            and 'gpu="0"' in line
        )
        assert line.endswith(f" {10 + machine}.0"), line


def test_an_xid_on_one_machines_gpu_drains_that_gpu(server: ServerProcess, place: Path) -> None:
    write_fake_nvml_state(_state_file(place, 2), {1: {"xid": 79, "xid_events": 1}})

    def drained() -> dict[str, Any] | None:
        gpus = json.loads(server.cli("gpus", "--json").stdout)
        return gpus[5] if gpus[5]["drained"] else None

    gpu = wait_for(drained, timeout_s=60, interval_s=0.5)
    assert gpu["node"] == MACHINES[2] and "79" in (gpu.get("drain_reason") or "")
    others = json.loads(server.cli("gpus", "--json").stdout)
    assert [g["index"] for g in others if g["drained"]] == [5]
    server.cli("resume", "5", check=False)


def test_a_users_two_machine_job_runs_as_her_held_to_her_mem_on_her_gpus(
    server: ServerProcess, users: UnixUsers, place: Path
) -> None:
    flag = place / f"finish-{uuid.uuid4().hex[:8]}"
    script = (
        'echo "rank=$GPUYARD_NODE_RANK user=$(id -un) cvd=$CUDA_VISIBLE_DEVICES '
        'ord=$GPU_DEVICE_ORDINAL memcg=$(grep :memory: /proc/self/cgroup | cut -d: -f3)"; '
        '[ "$GPUYARD_NODE_RANK" = 1 ] && echo "::gpuyard progress step=7 total=20 loss=0.25"; '
        f"while [ ! -e {flag} ]; do sleep 0.2; done"
    )
    job_id = _submit_as(server, users.alice, {
        "command": ["sh", "-c", script], "workdir": "/tmp", "nodes": 2, "gpus": 2,
        "mem": "512M",
    })  # fmt: skip
    log_path = server.state_dir / "jobs" / str(job_id) / "output.log"
    wait_for(lambda: log_path.exists() and log_path.read_text().count("memcg=") == 2,
             timeout_s=120)  # fmt: skip
    log = log_path.read_text()
    limits = [
        int((Path("/sys/fs/cgroup/memory" + line.split("memcg=")[1]) / "memory.limit_in_bytes")
            .read_text())
        for line in log.splitlines() if "memcg=" in line
    ]  # fmt: skip
    assert limits == [256 << 20, 256 << 20], log  # half of --mem 512M on each machine
    # Its progress, printed on the second machine, and the GPU stats of both machines' GPUs.
    progress = wait_for(lambda: (p := server.client().progress(job_id)) and p["step"] == 7 and p,
                        timeout_s=60, interval_s=0.3)  # fmt: skip
    assert progress["total"] == 20 and progress["metrics"] == {"loss": 0.25}
    running = _job(server, job_id)
    used: dict[str, list[int]] = {machine: [] for machine in running["node"].split(",")}
    on = {g["index"]: g["node"] for g in json.loads(server.cli("gpus", "--json").stdout)}
    for index in running["gpus"]:
        used[on[index]].append(index - MACHINES.index(on[index]) * 2)
    for k, (machine, devices) in enumerate(used.items()):
        values = {d: {"util_gpu": 30 + 40 * k} for d in devices}
        write_fake_nvml_state(_state_file(place, MACHINES.index(machine)), values)
    try:

        def both_read() -> Any:
            listed = {g["index"]: g for g in json.loads(server.cli("gpus", "--json").stdout)}
            mine = [listed[i] for i in running["gpus"]]
            st = _job(server, job_id).get("gpu_stats")
            return (st and st["util_peak_pct"] == 70 and sorted(g["util_pct"] for g in mine)
                    == [30, 70] and all(g["job"] == job_id for g in mine) and st)  # fmt: skip

        stats = wait_for(both_read, timeout_s=60, interval_s=0.3)
        assert stats["samples"] > 0
    finally:
        for machine in used:
            write_fake_nvml_state(_state_file(place, MACHINES.index(machine)), {})
    flag.touch()
    job = _ended(server, job_id)
    assert job["state"] == "COMPLETED", (job, log)
    assert job["owner"] == users.alice
    machines = job["node"].split(",")
    assert len(machines) == 2 and len(set(machines)) == 2
    gpus = {g["index"]: g for g in json.loads(server.cli("gpus", "--json").stdout)}
    for rank, machine in enumerate(machines):
        mine = [i for i in job["gpus"] if gpus[i]["node"] == machine]
        device = [i - MACHINES.index(machine) * 2 for i in mine]  # each machine's own numbering
        mask = ",".join(map(str, device))
        # GPU_DEVICE_ORDINAL: the same list as CUDA_VISIBLE_DEVICES, as Slurm's gres/gpu sets.
        line = f"[node{rank}] rank={rank} user={users.alice} cvd={mask} ord={mask} "
        assert line in log, log


def test_gpus_of_every_machine_are_shared_by_memory(server: ServerProcess, place: Path) -> None:
    flag = place / f"finish-{uuid.uuid4().hex[:8]}"
    script = f"while [ ! -e {flag} ]; do sleep 0.2; done"
    ids = [
        int(server.cli("submit", "--gpu-mem", "20G", "--", "sh", "-c", script).stdout)
        for _ in range(8)
    ]  # 8 shares on 6 GPUs: some GPU holds two
    try:
        wait_for(lambda: all(_job(server, j)["state"] == "RUNNING" for j in ids), timeout_s=120)
        held = [(_job(server, j)["node"], tuple(_job(server, j)["gpus"])) for j in ids]
        shared = {where for where in held if held.count(where) > 1}
        assert any(node != MACHINES[0] for node, _ in shared), held  # on another machine too
    finally:
        flag.touch()
    assert all(_ended(server, j)["state"] == "COMPLETED" for j in ids)


def test_a_job_over_its_gpu_mem_on_another_machine_ends_out_of_memory(
    server: ServerProcess, place: Path
) -> None:
    """The process a remote GPU lists is attributed to its job by that machine's agent (its
    pid means nothing on the server's machine): --gpu-mem holds there as on one box."""
    pidfile = place / f"pid-{uuid.uuid4().hex[:8]}"
    script = f"echo $$ > {pidfile}; exec sleep 120"
    job_id = int(server.cli("submit", "--gpu-type", "l40s", "--gpu-mem", "20G", "--",
                            "sh", "-c", script).stdout)  # fmt: skip
    job = wait_for(lambda: (j := _job(server, job_id))["state"] == "RUNNING" and j, timeout_s=120)
    assert job["node"] == MACHINES[2]
    pid = int(wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), timeout_s=60))
    device = job["gpus"][0] - 4  # that machine's own numbering
    try:
        write_fake_nvml_state(_state_file(place, 2), {}, procs={device: [(pid, 30_000)]})
        ended = _ended(server, job_id, timeout_s=60)
    finally:
        write_fake_nvml_state(_state_file(place, 2), {})
    assert ended["state"] == "OUT_OF_MEMORY", ended
    assert "over its --gpu-mem 20G" in ended["reason"], ended["reason"]


def test_the_dashboards_gpus_page_has_a_board_per_machine(
    server: ServerProcess, browser: Browser
) -> None:
    token = (server.state_dir / "token").read_text().strip()
    page = login(browser, server.url, token)
    try:
        page.goto("/ui/gpus")
        for machine, gpus in GPUS.items():
            board = page.get_by_role("region", name=f"Machine {MACHINES[machine]}")
            board.get_by_role("heading", name=f"{MACHINES[machine]} · 2 GPUs").wait_for()
            cards = board.locator("section.card")
            assert cards.count() == 2
            assert gpus[0][0] in cards.first.inner_text()  # its own GPUs' model
    finally:
        page.context.close()


def test_a_session_on_another_machine_is_typed_into_through_the_server(
    server: ServerProcess,
) -> None:
    """The terminal's socket is there; the server relays it (its socket here is the same
    path as on one box): typed commands run there, the exit code is `attach`'s."""
    body = {"command": ["sh"], "workdir": "/tmp", "kind": "interactive", "gpus": 1,
            "gpu_type": "l40s"}  # fmt: skip
    job_id = server.client()._json("POST", "/api/v1/jobs", body)["id"]
    term = Terminal(server, "attach", str(job_id))
    try:
        assert wait_for(lambda: _job(server, job_id)["state"] == "RUNNING", timeout_s=120)
        assert _job(server, job_id)["node"] == MACHINES[2]
        term.type("echo on-$GPUYARD_JOB_ID-gpus-$CUDA_VISIBLE_DEVICES; tty\n")
        term.expect(f"on-{job_id}-gpus-", timeout_s=60)
        term.expect("/dev/pts/")
        term.type("exit 4\n")
        assert term.exit_code(timeout_s=60) == 4
        ended = _ended(server, job_id)
        assert (ended["state"], ended["exit_code"]) == ("FAILED", 4)
    finally:
        term.close()
        server.cli("cancel", str(job_id), check=False)


def test_a_service_on_another_machine_is_health_checked_there(
    server: ServerProcess, place: Path
) -> None:
    """Its machine's agent asks it on that machine's loopback (the server's is not its)."""
    work = Path(tempfile.mkdtemp(prefix="svc-", dir=place))
    (work / "svc.py").write_text(SERVICE)
    body = {"command": [sys.executable, "svc.py"], "workdir": str(work), "kind": "service",
            "gpus": 1, "gpu_type": "l40s", "health_path": "/health",
            "health_grace_s": 0}  # fmt: skip
    job_id = server.client()._json("POST", "/api/v1/jobs", body)["id"]
    try:
        job = wait_for(lambda: (j := _job(server, job_id)).get("service_health")
                       and j["service_health"]["state"] == "healthy" and j,
                       timeout_s=120)  # fmt: skip
        assert job["node"] == MACHINES[2]
        (work / "sick").touch()  # answers 503 now: three failed checks in a row, a restart
        again = wait_for(lambda: (j := _job(server, job_id))["attempts"] and j, timeout_s=120)
        assert again["attempts"][0]["reason"].startswith("Unhealthy: 3 health checks"), again
    finally:
        server.cli("cancel", str(job_id), check=False)


def test_the_server_restarting_mid_job_re_adopts_it_on_every_machine(
    server: ServerProcess, place: Path
) -> None:
    flag = place / f"finish-{uuid.uuid4().hex[:8]}"
    script = (
        f'i=0; while [ ! -e {flag} ]; do i=$((i+1)); echo "tick $i"; sleep 0.5; done; '
        'echo "finished on node $GPUYARD_NODE_RANK"'
    )
    job_id = int(server.cli("submit", "--nodes", "2", "--gpus-per-node", "1", "--",
                            "sh", "-c", script).stdout)  # fmt: skip
    log_path = server.state_dir / "jobs" / str(job_id) / "output.log"
    wait_for(lambda: log_path.exists() and log_path.read_text().count("tick") >= 4, timeout_s=120)
    server.kill9()
    ticking = wait_for(lambda: marked_processes(str(flag)), timeout_s=10)
    assert len(ticking) >= 2  # both machines' jobs outlive the server
    server.start(timeout_s=240)
    # A SIGKILLed Ray head leaves its raylets' dashboard and runtime-env agents behind (Ray's
    # own, adopted by init); they hold nothing of gpuyard's.
    for orphan in ray_orphans():
        orphan.kill()
    assert _job(server, job_id)["state"] == "RUNNING"
    flag.touch()
    job = _ended(server, job_id)
    log = log_path.read_text()
    assert job["state"] == "COMPLETED", (job, log[-2000:])
    assert "[node0] finished on node 0" in log and "[node1] finished on node 1" in log
    for rank in (0, 1):  # every tick of each node, once, in order: nothing lost or doubled
        ticks = [int(line.split()[-1]) for line in log.splitlines()
                 if line.startswith(f"[node{rank}] tick ")]  # fmt: skip
        assert ticks == list(range(1, len(ticks) + 1)), log[-2000:]


def test_an_agent_killed_mid_job_is_started_again_and_re_adopts_it(
    server: ServerProcess, place: Path
) -> None:
    flag = place / f"finish-{uuid.uuid4().hex[:8]}"
    script = f'while [ ! -e {flag} ]; do echo tick; sleep 0.5; done; echo "done $GPUYARD_NODE_RANK"'
    job_id = int(server.cli("submit", "--nodes", "2", "--gpus-per-node", "1", "--",
                            "sh", "-c", script).stdout)  # fmt: skip
    wait_for(lambda: len(marked_processes(str(flag))) >= 2, timeout_s=120)
    agents = [p for p in psutil.process_iter(["cmdline"])
              if any("MachineAgent" in a for a in p.info["cmdline"] or ())]  # fmt: skip
    assert agents, "no agent actor found"
    for agent in agents:  # every other machine's agent, -9
        agent.kill()
    wait_for(lambda: [p for p in psutil.process_iter(["cmdline"])
                      if any("MachineAgent" in a for a in p.info["cmdline"] or ())
                      and p.pid not in {a.pid for a in agents}], timeout_s=120)  # fmt: skip
    assert _job(server, job_id)["state"] == "RUNNING"
    flag.touch()
    job = _ended(server, job_id)
    log = server.client().log(job_id).decode()
    assert job["state"] == "COMPLETED", (job, log[-2000:])
    assert "[node0] done 0" in log and "[node1] done 1" in log
