"""Multi-GPU data-parallel jobs on one machine: torchrun through gpuyard (gloo on CPU here)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.e2e.server import ServerProcess, pid_alive

REPO = Path(__file__).resolve().parents[2]
DDP = str(REPO / "examples" / "train_ddp.py")


def _ddp_job(server: ServerProcess, steps: int = 40) -> int:
    out = server.cli("submit", "--gpus", "2", "--distributed", "torchrun", "--",
                     sys.executable, DDP, "--steps", str(steps), "--log-every", "20")  # fmt: skip
    return int(out.stdout)


def _ended(server: ServerProcess, job_id: int) -> dict:  # type: ignore[type-arg]
    """The job once it has ended, however long a loaded machine takes to import torch in
    each rank: pytest's timeout (below) is the deadline, not a guess of a quiet machine's."""
    (job,) = server.client().wait([job_id], poll_s=0.2, raise_on_failure=False)
    return job


# Two torchrun jobs of two ranks each: six torch imports, which a loaded 2-core machine takes
# minutes over.
@pytest.mark.timeout(1200)
def test_two_ddp_jobs_at_once_train_with_two_ranks_each_on_their_own_ports(
    server: ServerProcess,
) -> None:
    first, second = _ddp_job(server), _ddp_job(server)
    ports = []
    for job_id in (first, second):
        job = _ended(server, job_id)
        log = server.client().log(job_id).decode()
        assert job["state"] == "COMPLETED", log[-3000:]
        assert job["distributed"] == "torchrun"
        ranks = re.findall(r"rank (\d)/2 local_rank \d world_size 2 .* master 127\.0\.0\.1:(\d+) "
                           r"\(CUDA_VISIBLE_DEVICES='(\d,\d)'\)", log)  # fmt: skip
        assert sorted(r for r, _, _ in ranks) == ["0", "1"], log[-3000:]
        assert {visible for _, _, visible in ranks} == {",".join(map(str, job["gpus"]))}
        ports.append({port for _, port, _ in ranks}.pop())
        first_loss, last_loss = map(float, re.search(r"done: loss (\S+) -> (\S+);", log).groups())  # type: ignore[union-attr]
        assert last_loss < first_loss / 4
    assert ports[0] != ports[1], "two concurrent jobs shared a rendezvous port"
    assert ports[0] != "29500"


FAILING_RANK = """
import os, sys, time
open(os.environ["PIDS"], "a").write(f"{os.getpid()}\\n")
if os.environ["RANK"] == "1":
    time.sleep(1)
    sys.exit(3)
time.sleep(300)
"""


def test_one_failing_rank_stops_the_others_and_the_reason_names_it(
    server: ServerProcess, tmp_path: Path
) -> None:
    script, pids = tmp_path / "rank.py", tmp_path / "pids"
    script.write_text(FAILING_RANK)
    out = server.cli("submit", "--gpus", "2", "--distributed", "torchrun", "--env",
                     f"PIDS={pids}", "--", sys.executable, str(script))  # fmt: skip
    job = _ended(server, int(out.stdout))
    assert job["state"] == "FAILED"
    assert job["reason"].startswith("RankFailed: rank 1 (local rank 1) exited with code 3"), job
    ranks = [int(p) for p in pids.read_text().split()]
    assert len(ranks) == 2 and not [p for p in ranks if pid_alive(p)]


def test_distributed_needs_gpus_and_a_known_mode(server: ServerProcess) -> None:
    no_gpus = server.cli("submit", "--distributed", "torchrun", "--", "true", check=False)
    assert no_gpus.returncode == 1
    assert no_gpus.stderr.count("\n") == 1 and "--gpus N" in no_gpus.stderr
    unknown = server.cli("submit", "--gpus", "1", "--distributed", "mpi", "--", "true",
                         check=False)  # fmt: skip
    assert unknown.returncode == 1 and unknown.stderr.count("\n") == 1
    assert "distributed" in unknown.stderr
    assert server.client().jobs(all=True) == []
