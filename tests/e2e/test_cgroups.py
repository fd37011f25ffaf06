"""Each job in its own control group (issue 11): held to --mem by the kernel (over it: killed,
and reported as a host-RAM out-of-memory), to a pids limit, denied the other GPUs' device
nodes; its groups removed when it ends. Real cgroups (root), real supervisors, through
`LocalExecutor`; and through a real server, the OUT_OF_MEMORY state and its reason."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuyard.adapters.executor.cgroups import JobCgroups
from tests.e2e.executor_rig import Rig
from tests.e2e.server import ServerProcess, wait_ended, wait_for

PIDS_MAX = 40


@pytest.fixture
def cgroups() -> Iterator[JobCgroups]:
    made = JobCgroups(f"test-{uuid.uuid4().hex[:8]}", pids_max=PIDS_MAX, all_gpus=(0, 1, 2, 3))
    if os.geteuid() != 0 or not made.available:
        pytest.skip(f"no per-job cgroups here: {made.describe()}")
    yield made
    made.close()


@pytest.fixture
def rig(tmp_path: Path, cgroups: JobCgroups) -> Iterator[Rig]:
    r = Rig(tmp_path, cgroups)
    yield r
    r.executor.close()


def _groups(rig: Rig, job_id: int) -> list[str]:
    launch = json.loads((rig.executor.job_dir(job_id) / "launch.json").read_text())
    return list(launch["cgroups"])


def test_a_job_over_its_mem_is_killed_and_reported_as_host_oom(rig: Rig):
    hog = '/usr/bin/python3 -c \'b = b"x" * (400 << 20); print("survived")\''
    rig.start(1, f"cat /proc/self/cgroup; {hog}", mem_mib=64)
    end = rig.wait_end(1)
    assert end.out_of_memory and end.exit_code == 137, end  # sh: its python was SIGKILLed
    assert end.reason is not None and "--mem 64M of host RAM" in end.reason
    assert "not GPU memory" in end.reason and "survived" not in rig.log(1)
    assert "/gpuyard/" in rig.log(1) and "job-1" in rig.log(1)  # it ran inside its group
    assert not any(Path(group).exists() for group in _groups(rig, 1))  # removed at its end
    rig.start(2, "/usr/bin/python3 -c 'b = b\"x\" * (16 << 20)'", mem_mib=64)
    within = rig.wait_end(2)
    assert within.exit_code == 0 and not within.out_of_memory


def test_a_job_is_held_to_the_pids_limit(rig: Rig):
    script = f"i=0; while [ $i -lt {PIDS_MAX * 2} ]; do sleep 2 & i=$((i+1)); done; wait"
    rig.start(3, script, limit_s=30)
    rig.wait_end(3)
    assert "fork" in rig.log(3).lower(), rig.log(3)  # sh: Cannot fork


def test_the_limits_are_written_to_the_jobs_groups(rig: Rig, tmp_path: Path):
    """Read while it runs: memory, CPU quota, pids, and (v1) the other GPUs' nodes denied."""
    gate = tmp_path / "gate"
    rig.start(4, f"while [ ! -e {gate} ]; do sleep 0.05; done", mem_mib=128, cpus=2,
              gpus=(1,))  # fmt: skip
    groups = wait_for(lambda: _groups(rig, 4) if (rig.executor.job_dir(4) / "launch.json")
                      .exists() else None)  # fmt: skip
    files = {name: Path(g, name) for g in groups for name in os.listdir(g)}
    try:
        if "memory.limit_in_bytes" in files:  # v1
            assert files["memory.limit_in_bytes"].read_text().strip() == str(128 << 20)
            assert files["cpu.cfs_quota_us"].read_text().strip() == "200000"
        else:  # v2
            assert files["memory.max"].read_text().strip() == str(128 << 20)
            assert files["cpu.max"].read_text().split()[0] == "200000"
        assert files["pids.max"].read_text().strip() == str(PIDS_MAX)
        members = wait_for(lambda: files["cgroup.procs"].read_text().split() or None)
        assert members  # the job is in its groups; its supervisor is not
        supervisor = (rig.executor.job_dir(4) / "supervisor.pid").read_text().strip()
        assert supervisor not in members
    finally:
        gate.touch()
    assert rig.wait_end(4).exit_code == 0
    assert not any(Path(group).exists() for group in groups)


def test_a_job_cannot_open_other_gpus_device_nodes(rig: Rig, tmp_path: Path):
    """v1 devices: /dev/nvidiaN of other GPUs is denied by the kernel (EPERM), its own is not
    (ENXIO here: no driver behind the node). Nodes made with mknod, as the driver makes them."""
    if not any("/devices/" in g for g in _probe_groups(rig)):
        pytest.skip("no devices controller: GPU device confinement needs cgroup v1 here")
    nodes = tmp_path / "dev"
    nodes.mkdir()
    for minor in (0, 1):
        subprocess.run(["mknod", str(nodes / f"nvidia{minor}"), "c", "195", str(minor)],
                       check=True)  # fmt: skip
    script = (
        f"(exec 3< {nodes}/nvidia0) 2>&1 | sed 's/^/gpu0: /'; "
        f"(exec 3< {nodes}/nvidia1) 2>&1 | sed 's/^/gpu1: /'; true"
    )
    rig.start(6, script, gpus=(1,))
    assert rig.wait_end(6).exit_code == 0
    log = rig.log(6)
    assert "gpu0:" in log and "Operation not permitted" in log.split("gpu1:")[0], log
    assert "Operation not permitted" not in log.split("gpu1:", 1)[1], log


def _probe_groups(rig: Rig) -> list[str]:
    rig.start(5, "true")
    rig.wait_end(5)
    return _groups(rig, 5)


# -- through a real server ---------------------------------------------------------------


@pytest.fixture
def server(tmp_path: Path, cgroups: JobCgroups) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path / "state", "--gpus", "2", "--kill-grace", "1")
    srv.start()
    yield srv
    srv.stop()
    srv.kill_jobs()


def test_a_server_job_over_its_mem_ends_out_of_memory_for_host_ram(server: ServerProcess):
    hog = "b = b'x' * (400 << 20)"
    job_id = int(server.cli("submit", "--mem", "64M", "--", "/usr/bin/python3", "-c", hog).stdout)
    job = wait_ended(server.client(), job_id)
    assert job["state"] == "OUT_OF_MEMORY", job
    assert "--mem 64M of host RAM" in job["reason"] and "not GPU memory" in job["reason"]


def test_the_server_says_how_jobs_are_held_and_an_admin_may_turn_cgroups_off(
    server: ServerProcess, tmp_path: Path
):
    assert server.client().info()["confinement"].startswith("cgroup v")
    env = {**os.environ, "GPUYARD_JOB_CGROUPS": "0"}
    off = ServerProcess(tmp_path / "off", "--gpus", "1", "--kill-grace", "1", env=env).start()
    try:
        assert off.client().info()["confinement"].startswith("none (GPUYARD_JOB_CGROUPS=0)")
        hog = "b = b'x' * (200 << 20)"
        job_id = int(off.cli("submit", "--mem", "64M", "--", "/usr/bin/python3", "-c", hog).stdout)
        job = wait_ended(off.client(), job_id)
        assert job["state"] == "COMPLETED"  # advisory: nothing held it to --mem
    finally:
        off.stop()
        off.kill_jobs()


def test_a_server_with_its_clock_a_day_ahead_sweeps_no_group_made_a_moment_ago(
    cgroups: JobCgroups, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another server on this machine made a job's group and is about to move the job into
    # it; a server starting with its wall clock stepped a day ahead must not see it as old.
    from gpuyard.adapters.executor import cgroups as module

    other = JobCgroups(f"test-{uuid.uuid4().hex[:8]}", pids_max=PIDS_MAX, all_gpus=(0,))
    try:
        made = other.create(7, other.limits(64, 1, (0,)))
        assert made
        real_time = module.time.time
        monkeypatch.setattr(module.time, "time", lambda: real_time() + 86_400)
        again = JobCgroups(f"test-{uuid.uuid4().hex[:8]}", pids_max=PIDS_MAX, all_gpus=(0,))
        again.close()
        assert all(Path(group).is_dir() for group in made)
    finally:
        other.close()


def test_a_job_of_a_user_gets_its_group_when_the_servers_folder_was_swept_just_now(
    cgroups: JobCgroups,
) -> None:
    # Another server's start sweeps empty server folders; one can go between this server
    # making its folder again and making the user's folder in it (the job then could not
    # start: "No such file or directory ... /user-0", seen with two test servers at once).
    other = JobCgroups(f"test-{uuid.uuid4().hex[:8]}", pids_max=PIDS_MAX, all_gpus=(0,))
    try:
        base = other._v1["memory"]
        assert base is not None
        with contextlib.suppress(OSError):
            base.rmdir()  # the sweep, after the job's create made the folder again
        folder = other._user_folder(base, 0)
        assert folder.is_dir() and folder.parent == base
    finally:
        other.close()
