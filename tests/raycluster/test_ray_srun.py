"""`srun` in a multi-node job on Ray (`--backend ray`): the job's command runs once per machine
and each machine's srun starts that machine's tasks, ranks k x N ... k x N + N-1, so a script's
`srun ...` spans the job's two (logical) machines."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.e2e.server import ServerProcess, wait_ended
from tests.raycluster.conftest import ray_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ray_server(tmp_path_factory.mktemp("ray-srun") / "state") as proc:
        yield proc


def test_srun_spans_the_machines_of_a_multi_node_job(server: ServerProcess) -> None:
    show = 'echo "task $SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID $SLURM_NTASKS $SLURMD_NODENAME"'
    with server.client() as client:
        job = client.submit(["srun", "sh", "-c", show], nodes=2, gpus=2, ntasks_per_node=2)
        ended = wait_ended(client, job["id"], 120)
        log = client.log(job["id"]).decode()
    assert ended["state"] == "COMPLETED", log[-3000:]
    tasks = sorted(re.findall(r"^\[node(\d)\] task (\d) (\d) (\d) (\d) (\S+)$", log, re.MULTILINE))
    assert tasks == [
        ("0", "0", "0", "0", "4", "gpuyard-local-0"),
        ("0", "1", "1", "0", "4", "gpuyard-local-0"),
        ("1", "2", "0", "1", "4", "gpuyard-local-1"),
        ("1", "3", "1", "1", "4", "gpuyard-local-1"),
    ], log[-3000:]
