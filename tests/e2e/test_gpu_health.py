"""A failing GPU is taken out of service, its job ends NODE_FAIL, and admins drain and resume
GPUs: with the real nvidia-ml-py against the project's fake libnvidia-ml."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.server import ServerProcess, wait_for
from tests.fakenvml import build_fake_nvml, fake_nvml_env, gcc_path, write_fake_nvml_state

pytestmark = pytest.mark.skipif(gcc_path() is None, reason="gcc is needed to build fake NVML")

GPUS = [("NVIDIA H200", 143771, f"GPU-0000000{i}-aaaa-bbbb-cccc-000000000000") for i in range(2)]


@pytest.fixture(scope="module")
def nvml_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fake_nvml(tmp_path_factory.mktemp("nvml"))


def _start(
    tmp_path: Path,
    nvml_dir: Path,
    values: dict[int, dict[str, int]],
    *args: str,
    procs: dict[int, list[tuple[int, int]]] | None = None,
    **env: str,
) -> tuple[ServerProcess, Path]:
    """A server on fake GPUs (one per key of `values`, their state), sampled every 0.2 s;
    returns it and the fake NVML state file the test rewrites."""
    state = tmp_path / "nvml_state"
    write_fake_nvml_state(state, values, procs=procs)
    env = fake_nvml_env(
        nvml_dir, gpus=GPUS[: len(values)], state=state, GPUYARD_TELEMETRY_S="0.2", **env
    )
    return ServerProcess(tmp_path / "state", *args, env=env).start(), state


def _job(server: ServerProcess, job_id: int) -> dict:  # type: ignore[type-arg]
    return json.loads(server.cli("show", str(job_id), "--json").stdout)  # type: ignore[no-any-return]


def _gpus(server: ServerProcess) -> list[dict]:  # type: ignore[type-arg]
    return json.loads(server.cli("gpus", "--json").stdout)  # type: ignore[no-any-return]


def test_an_xid_drains_the_gpu_fails_its_job_and_admins_resume_and_drain(
    tmp_path: Path, nvml_dir: Path
):
    # Node-failure requeues off: the job ends NODE_FAIL (tests/e2e/test_retries.py: requeued).
    server, state = _start(tmp_path, nvml_dir, {0: {}, 1: {}}, "--kill-grace", "1",
                           GPUYARD_NODE_FAIL_REQUEUES="0")  # fmt: skip
    try:
        victim = int(server.cli("submit", "--gpus", "1", "--", "sleep", "60").stdout)
        wait_for(lambda: _job(server, victim)["state"] == "RUNNING")
        bad = _job(server, victim)["gpus"][0]
        write_fake_nvml_state(state, {bad: {"xid": 79, "xid_events": 1}, 1 - bad: {}})

        failed = wait_for(lambda: (j := _job(server, victim))["state"] == "NODE_FAIL" and j)
        assert f"GPU {bad} was taken out of service" in failed["reason"]
        assert "XID 79" in failed["reason"]
        gpu = _gpus(server)[bad]
        assert gpu["drained"] and "XID 79" in gpu["drain_reason"]
        assert "DRAINED" in server.cli("gpus").stdout

        pair = int(server.cli("submit", "--gpus", "2", "--", "sleep", "60").stdout)
        single = int(server.cli("submit", "--gpus", "1", "--", "sleep", "60").stdout)
        wait_for(lambda: _job(server, single)["state"] == "RUNNING")
        assert _job(server, single)["gpus"] == [1 - bad]  # never the drained GPU
        assert _job(server, pair)["state"] == "PENDING"

        server.cli("cancel", str(single))
        assert "back in service" in server.cli("admin", "resume", str(bad)).stdout
        wait_for(lambda: _job(server, pair)["state"] == "RUNNING")  # the same XID: no re-drain
        assert not _gpus(server)[bad]["drained"]

        drain = ("admin", "drain", str(bad), "--reason", "fan replacement", "--now")
        out = server.cli(*drain).stdout
        assert f"job(s) {pair} on it are stopped and requeued" in out  # an admin's: not failed
        requeued = wait_for(lambda: (j := _job(server, pair))["restarts"] == 1 and j)
        assert requeued["state"] == "PENDING"  # 2 GPUs, one of them drained: it waits

        again = server.cli("admin", "resume", str(1 - bad), check=False)
        assert again.returncode == 1 and again.stderr.count("\n") == 1
        assert "is in service" in again.stderr
        unknown = server.cli("admin", "drain", "7", check=False)
        assert unknown.returncode == 1 and "not one of this server's GPUs" in unknown.stderr
    finally:
        server.stop()
        server.kill_jobs()


def test_a_gpu_holding_foreign_memory_gets_no_new_job_until_it_is_released(
    tmp_path: Path, nvml_dir: Path
):
    import os

    # A process gpuyard did not start (this test) holds 2000 MiB on the only GPU.
    server, state = _start(tmp_path, nvml_dir, {0: {}}, procs={0: [(os.getpid(), 2000)]})
    try:
        job = int(server.cli("submit", "--gpus", "1", "--", "sleep", "60").stdout)
        waiting = wait_for(lambda: (j := _job(server, job))["reason"].startswith("GpuMemory") and j)
        assert waiting["state"] == "PENDING"
        assert (
            "GPU 0 still has 2000 MiB used by processes that are no running job's"
            in (waiting["reason"])
        )
        write_fake_nvml_state(state, {0: {}})  # the memory is released
        wait_for(lambda: _job(server, job)["state"] == "RUNNING")
    finally:
        server.stop()
        server.kill_jobs()


def test_an_idle_job_is_flagged_then_cancelled_after_its_warning(tmp_path: Path, nvml_dir: Path):
    server, _ = _start(
        tmp_path, nvml_dir, {0: {"util_gpu": 0}}, "--kill-grace", "1",
        GPUYARD_IDLE_AFTER_S="1", GPUYARD_IDLE_CANCEL_S="2",
    )  # fmt: skip
    try:
        job = int(server.cli("submit", "--gpus", "1", "--", "sleep", "60").stdout)
        flagged = wait_for(lambda: (j := _job(server, job))["idle_since"] and j)
        assert flagged["state"] == "RUNNING"
        assert "idle since" in server.cli("queue").stdout
        ended = wait_for(lambda: (j := _job(server, job))["state"] == "CANCELLED" and j)
        assert ended["reason"].startswith("Idle: its GPUs stayed below 5%")
    finally:
        server.stop()
        server.kill_jobs()


def test_a_jobs_process_on_a_gpu_not_allocated_to_it_is_marked(tmp_path: Path, nvml_dir: Path):
    server, state = _start(tmp_path, nvml_dir, {0: {}, 1: {}})
    try:
        pidfile = tmp_path / "pid"
        job = int(server.cli("submit", "--gpus", "1", "--", "sh", "-c",
                             f"echo $$ > {pidfile}; exec sleep 60").stdout)  # fmt: skip
        pid = int(wait_for(lambda: pidfile.exists() and pidfile.read_text().strip()))
        mine = _job(server, job)["gpus"][0]
        write_fake_nvml_state(state, {0: {}, 1: {}}, procs={1 - mine: [(pid, 500)]})

        def listed() -> list[dict] | None:  # type: ignore[type-arg]
            return _gpus(server)[1 - mine]["processes"] or None

        (proc,) = wait_for(listed)
        assert (proc["job"], proc["misplaced"]) == (job, True)
        assert "on a GPU not allocated to that job" in server.cli("gpus").stdout
    finally:
        server.stop()
        server.kill_jobs()


def test_a_finished_jobs_gpu_stats_survive_a_server_restart(tmp_path: Path, nvml_dir: Path):
    server, _ = _start(tmp_path, nvml_dir, {0: {"util_gpu": 80, "mem_used_mib": 3000}})
    try:
        job = int(server.cli("submit", "--gpus", "1", "--", "sleep", "2").stdout)
        done = wait_for(lambda: (j := _job(server, job))["state"] == "COMPLETED" and j)
        assert done["gpu_stats"] is not None and done["gpu_stats"]["util_peak_pct"] == 80
        server.stop()
        server.start()
        assert _job(server, job)["gpu_stats"] == done["gpu_stats"]
    finally:
        server.stop()
        server.kill_jobs()
