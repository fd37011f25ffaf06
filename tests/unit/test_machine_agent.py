"""The machine agent's fence (`adapters/agent/machine.py`): it ends the jobs still running on
its machine that the server no longer places there, and nothing else: a stale folder whose
supervisor pid now names another process leaves that process and its session alone."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from gpuyard.adapters.agent.machine import MachineAgent


def test_the_fence_spares_a_process_that_reused_a_stale_supervisors_pid(tmp_path: Path) -> None:
    agent = MachineAgent("m", str(tmp_path / "agent"), str(tmp_path / "server"), gpus="0",
                         job_cgroups=False, grace_s=1)  # fmt: skip
    # A session leader with a child: what the old fence took for the job's tree.
    bystander = subprocess.Popen(["sh", "-c", "sleep 30 & wait"], start_new_session=True)
    try:
        folder = tmp_path / "agent" / "jobs" / "7"
        folder.mkdir(parents=True)
        (folder / "supervisor.pid").write_text(str(bystander.pid))
        (folder / "launch.json").write_text("{}")
        time.sleep(0.2)  # the child is running
        assert agent.fence(keep=[]) == []
        assert bystander.poll() is None
        children = subprocess.run(["pgrep", "-s", str(bystander.pid)], capture_output=True,
                                  text=True).stdout.split()  # fmt: skip
        assert len(children) == 2, children  # sh and its sleep, both alive
    finally:
        subprocess.run(["pkill", "-KILL", "-s", str(bystander.pid)], check=False)
        bystander.wait()
        agent.close()


def test_every_path_of_a_plan_in_the_servers_jobs_folder_is_moved_to_the_agents(
    tmp_path: Path,
) -> None:
    """The checkpoint dir and the progress file too: they were left at the server's paths,
    so on another machine the job's GPUYARD_CHECKPOINT_DIR did not exist."""
    from gpuyard.services.ports import LaunchPlan

    server = tmp_path / "server"
    agent = MachineAgent("m", str(tmp_path / "agent"), str(server), gpus="0", job_cgroups=False)
    try:
        job = f"{server}/7"
        plan = LaunchPlan(
            ("sh", f"{job}/script"), {"GPUYARD_CHECKPOINT_DIR": f"{job}/checkpoint"}, "/tmp",
            f"{job}/output.log", script=(f"{job}/script", "echo"),
            checkpoint_dir=f"{job}/checkpoint", progress_file=f"{job}/progress.jsonl",
        )  # fmt: skip
        moved = agent.localized(plan)
        here = f"{tmp_path / 'agent'}/jobs/7"
        assert moved.checkpoint_dir == f"{here}/checkpoint"
        assert moved.progress_file == f"{here}/progress.jsonl"
        assert moved.env["GPUYARD_CHECKPOINT_DIR"] == moved.checkpoint_dir
        assert (moved.log_path, moved.argv[1]) == (f"{here}/output.log", f"{here}/script")
    finally:
        agent.close()
