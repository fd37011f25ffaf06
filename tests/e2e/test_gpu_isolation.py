"""Twelve jobs on four declared GPUs: never more than four GPUs in use, never one GPU shared."""

from __future__ import annotations

import itertools
from pathlib import Path

from tests.e2e.server import ServerProcess

RECORD = (
    'echo "$GPUYARD_JOB_ID $CUDA_VISIBLE_DEVICES $(date +%s.%N)" > "$OUT/$GPUYARD_JOB_ID.start"; '
    "sleep 0.4; "
    'date +%s.%N > "$OUT/$GPUYARD_JOB_ID.end"; echo "job $GPUYARD_JOB_ID done"'
)


def test_twelve_jobs_share_four_gpus_without_conflict(server: ServerProcess, tmp_path: Path):
    out = tmp_path / "out"
    out.mkdir()
    ids = []
    for gpus in [1] * 10 + [2] * 2:
        result = server.cli("submit", "--gpus", str(gpus), "--env", f"OUT={out}", "--",
                            "sh", "-c", RECORD)  # fmt: skip
        ids.append(int(result.stdout.strip()))
    assert server.cli("wait", *map(str, ids)).returncode == 0

    spans = []
    for job_id, requested in zip(ids, [1] * 10 + [2] * 2, strict=True):
        _, visible, start = (out / f"{job_id}.start").read_text().split()
        end = float((out / f"{job_id}.end").read_text())
        gpus = [int(g) for g in visible.split(",")]
        assert len(gpus) == requested, f"job {job_id} saw {visible}"
        spans.append((float(start), end, set(gpus)))
        job = server.client().job(job_id)
        assert job["state"] == "COMPLETED" and job["exit_code"] == 0
        assert sorted(job["gpus"]) == sorted(gpus)
        assert server.cli("logs", str(job_id)).stdout == f"job {job_id} done\n"

    for (s1, e1, g1), (s2, e2, g2) in itertools.combinations(spans, 2):
        if s1 < e2 and s2 < e1:  # overlapping in time
            assert not g1 & g2, f"GPUs {g1 & g2} shared by two running jobs"
    for t, _, _ in spans:
        in_use = sum(len(g) for s, e, g in spans if s <= t < e)
        assert in_use <= 4


def test_job_environment_names_exactly_its_gpus(server: ServerProcess, tmp_path: Path):
    script = (
        'echo "[$CUDA_VISIBLE_DEVICES] $CUDA_DEVICE_ORDER $GPUYARD_JOB_ID $GPUYARD_JOB_NAME '
        '$GPUYARD_NUM_GPUS"'
    )
    cpu_job = server.cli("submit", "--name", "cpu-only", "--", "sh", "-c", script).stdout.strip()
    gpu_job = server.cli("submit", "--gpus", "2", "--name", "two", "--", "sh", "-c", script)
    gpu_job_id = gpu_job.stdout.strip()
    server.cli("wait", cpu_job, gpu_job_id)
    assert server.cli("logs", cpu_job).stdout == f"[] PCI_BUS_ID {cpu_job} cpu-only 0\n"
    held = server.client().job(int(gpu_job_id))["gpus"]
    expected = f"[{','.join(map(str, held))}] PCI_BUS_ID {gpu_job_id} two 2\n"
    assert server.cli("logs", gpu_job_id).stdout == expected


def test_failed_job_records_its_exit_code(server: ServerProcess):
    job_id = server.cli("submit", "--", "sh", "-c", "echo oops >&2; exit 3").stdout.strip()
    waited = server.cli("wait", job_id, check=False)
    assert waited.returncode == 1
    assert "FAILED" in waited.stderr
    job = server.client().job(int(job_id))
    assert (job["state"], job["exit_code"]) == ("FAILED", 3)
    assert "exit" in job["reason"].lower()
    assert server.cli("logs", job_id).stdout == "oops\n"


def test_a_program_not_on_the_path_is_refused_at_submit_in_one_line(server: ServerProcess):
    """Not queued to fail LaunchFailed after its wait (issue 26)."""
    refused = server.cli("submit", "--", "no-such-program-xyz", check=False)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1
    assert refused.stderr.startswith("gpuyard: no-such-program-xyz: not found on the job's PATH")
    assert server.client().jobs(all=True) == []  # nothing was queued
