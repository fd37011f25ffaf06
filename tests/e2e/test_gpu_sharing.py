"""GPU sharing by memory (`--gpu-mem`), end to end: jobs that declare GPU memory share a GPU
while their requests fit, a job over its budget ends OUT_OF_MEMORY and its neighbour keeps
running, and `submit` suggests a --gpu-mem from earlier runs. On the fake NVML (real
nvidia-ml-py) and on declared GPUs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.server import ServerProcess, wait_for
from tests.fakenvml import build_fake_nvml, fake_nvml_env, gcc_path, write_fake_nvml_state

H200 = ("NVIDIA H200", 143771, "GPU-00000000-aaaa-bbbb-cccc-000000000000")


def _job(server: ServerProcess, job_id: int) -> dict:  # type: ignore[type-arg]
    return json.loads(server.cli("show", str(job_id), "--json").stdout)  # type: ignore[no-any-return]


def _submit(server: ServerProcess, tmp_path: Path, name: str, *args: str) -> tuple[int, Path]:
    """A job that records its pid and its GPU-memory environment, then sleeps."""
    pidfile = tmp_path / f"{name}.pid"
    script = (f"echo $$ > {pidfile}; env | grep -E '^(GPUYARD_GPU_MEM|XLA_PYTHON|TF_FORCE|"
              "PYTHONPATH|CUDA_VISIBLE)' | sort; exec sleep 60")  # fmt: skip
    out = server.cli("submit", "--name", name, *args, "--", "sh", "-c", script).stdout
    return int(out), pidfile


@pytest.mark.skipif(gcc_path() is None, reason="gcc is needed to build fake NVML")
def test_two_jobs_share_a_gpu_a_third_waits_and_one_over_budget_ends_out_of_memory(
    tmp_path: Path,
) -> None:
    nvml_dir = build_fake_nvml(tmp_path / "nvml")
    state = tmp_path / "nvml_state"
    write_fake_nvml_state(state, {0: {}})
    env = fake_nvml_env(nvml_dir, gpus=[H200], state=state, GPUYARD_TELEMETRY_S="0.2")
    server = ServerProcess(tmp_path / "state", "--kill-grace", "1", env=env).start()
    try:
        a, a_pid = _submit(server, tmp_path, "big-eval", "--gpu-mem", "60G")
        b, b_pid = _submit(server, tmp_path, "notebook", "--gpu-mem", "60G")
        c, _ = _submit(server, tmp_path, "trial", "--gpu-mem", "60G")
        whole = int(server.cli("submit", "--gpus", "1", "--", "sleep", "60").stdout)
        for job in (a, b):
            wait_for(lambda job=job: _job(server, job)["state"] == "RUNNING")
        assert _job(server, a)["gpus"] == _job(server, b)["gpus"] == [0]
        waiting = wait_for(lambda: "GPU memory" in (j := _job(server, c))["reason"] and j)
        assert waiting["state"] == "PENDING"
        assert "60G wanted on 1 GPU" in waiting["reason"], waiting["reason"]
        assert _job(server, whole)["state"] == "PENDING"  # no whole GPU while it is shared

        queue = server.cli("queue").stdout
        assert "1x60G" in queue
        gpus = json.loads(server.cli("gpus", "--json").stdout)
        assert gpus[0]["jobs"] == [a, b] and gpus[0]["shared_free_mib"] == 143771 - 2 * 61440
        assert "shared (--gpu-mem)" in server.cli("gpus").stdout

        # What the job was given: its budget, the allocator cap below it, the startup hook.
        wait_for(lambda: "GPUYARD_GPU_MEM_MIB" in Path(_job(server, a)["log_path"]).read_text())
        log = Path(_job(server, a)["log_path"]).read_text()
        assert "GPUYARD_GPU_MEM_MIB=61440" in log and "GPUYARD_GPU_MEM_CAP_MIB=60416" in log
        assert "jobhooks/site" in log and "TF_FORCE_GPU_ALLOW_GROWTH=true" in log
        assert f"XLA_PYTHON_CLIENT_MEM_FRACTION={60416 / 143771:.4f}" in log

        # Job a's process goes over its 60 GiB; b's stays within: a is stopped, b runs on.
        pid_a, pid_b = (int(wait_for(lambda p=p: p.exists() and p.read_text().strip()))
                        for p in (a_pid, b_pid))  # fmt: skip
        write_fake_nvml_state(state, {0: {}}, procs={0: [(pid_a, 70_000), (pid_b, 30_000)]})
        ended = wait_for(lambda: (j := _job(server, a))["state"] == "OUT_OF_MEMORY" and j)
        assert "GpuMemLimit: used 68.4G on GPU 0, over its --gpu-mem 60G" in ended["reason"]
        assert "peak 68.4G" in ended["reason"] and "--gpu-mem 86G" in ended["reason"]
        assert _job(server, b)["state"] == "RUNNING"
        wait_for(lambda: _job(server, c)["state"] == "RUNNING")  # a's share went to c
        assert _job(server, c)["gpus"] == [0]

        # Next time, `submit` warns from the peak of the run that went over.
        again = server.cli("submit", "--name", "big-eval", "--gpu-mem", "60G", "--", "true")
        assert "earlier runs of 'big-eval' peaked at 68.4G per GPU" in again.stderr
        assert "--gpu-mem 86G would hold it" in again.stderr
        assert again.stdout.strip().isdigit()  # stdout stays the id alone

        for job in (b, c, int(again.stdout)):
            server.cli("cancel", str(job), check=False)
        wait_for(lambda: _job(server, whole)["state"] == "RUNNING")  # the GPU is whole again
    finally:
        server.stop()


def test_declared_gpus_share_by_their_declared_memory_and_bad_requests_are_one_line(
    tmp_path: Path,
) -> None:
    server = ServerProcess(tmp_path / "state", "--gpus", "1", "--gpu-mem-per-gpu", "16G").start()
    try:
        jobs = [int(server.cli("submit", "--gpu-mem", "8G", "--", "sleep", "60").stdout)
                for _ in range(3)]  # fmt: skip
        wait_for(lambda: all(_job(server, j)["state"] == "RUNNING" for j in jobs[:2]))
        assert _job(server, jobs[2])["state"] == "PENDING"
        assert _job(server, jobs[0])["num_gpus"] == 1  # --gpu-mem alone means one GPU

        too_big = server.cli("submit", "--gpu-mem", "20G", "--", "true", check=False)
        assert too_big.returncode == 1
        assert too_big.stderr.strip().splitlines() == [
            "gpuyard: --gpu-mem 20G is more than a GPU here has (16G); ask for at most that, "
            "or for whole GPUs without --gpu-mem"
        ]
        bad = server.cli("submit", "--gpu-mem", "lots", "--", "true", check=False)
        assert bad.returncode == 1 and "bad size 'lots'" in bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1

        # A restarted server re-creates the shared GPU from the jobs still running on it.
        server.kill9()
        server.start()
        assert [_job(server, j)["state"] for j in jobs] == ["RUNNING", "RUNNING", "PENDING"]
        gpu = json.loads(server.cli("gpus", "--json").stdout)[0]
        assert gpu["jobs"] == jobs[:2] and gpu["shared_free_mib"] == 0
        server.cli("cancel", str(jobs[0]))
        wait_for(lambda: _job(server, jobs[2])["state"] == "RUNNING")
        assert _job(server, jobs[2])["gpus"] == [0]
        for job in jobs[1:]:
            server.cli("cancel", str(job))
    finally:
        server.stop()


def test_declared_gpus_without_a_memory_size_refuse_gpu_mem_with_the_fix(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "state", "--gpus", "2").start()
    try:
        out = server.cli("submit", "--gpu-mem", "8G", "--", "true", check=False)
        assert out.returncode == 1 and "start it with --gpu-mem-per-gpu SIZE" in out.stderr
        assert json.loads(server.cli("queue", "--all", "--json").stdout) == []  # nothing lost
    finally:
        server.stop()
