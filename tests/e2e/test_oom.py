"""A job that dies of GPU out-of-memory ends OUT_OF_MEMORY with the framework's message."""

from __future__ import annotations

from tests.e2e.server import ServerProcess, wait_for

OOM = (
    "echo step 1; echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB'"
    " >&2; exit 1"
)


def test_an_oom_job_ends_out_of_memory_and_a_plain_failure_stays_failed(server: ServerProcess):
    oom = int(server.cli("submit", "--gpus", "1", "--", "sh", "-c", OOM).stdout)
    plain = int(server.cli("submit", "--gpus", "1", "--", "sh", "-c", "exit 3").stdout)
    client = server.client()
    job = wait_for(lambda: (j := client.job(oom))["state"] not in ("PENDING", "RUNNING") and j)
    assert job["state"] == "OUT_OF_MEMORY"
    assert job["reason"].startswith("OutOfMemory: the job ran out of GPU memory (torch.")
    assert "exited with code 1" in job["reason"]
    other = wait_for(lambda: (j := client.job(plain))["state"] not in ("PENDING", "RUNNING") and j)
    assert other["state"] == "FAILED"
    assert server.cli("wait", str(oom), check=False).returncode == 1
