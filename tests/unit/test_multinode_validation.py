"""Submissions that span machines (`--nodes`) or share GPUs (`--gpu-mem`): what is refused,
with the one line that says why."""

from __future__ import annotations

import pytest

from gpuyard.api.convert import spec_from_wire
from gpuyard.domain.errors import InvalidRequest
from gpuyard.schemas.v1 import JobSubmitIn


def _spec(**fields: object):  # type: ignore[no-untyped-def]
    return spec_from_wire(JobSubmitIn(command=["python", "t.py"], workdir="/", **fields))  # type: ignore[arg-type]


def test_a_two_node_job_splits_its_gpus_evenly() -> None:
    spec = _spec(nodes=2, gpus=8, distributed="torchrun")
    assert (spec.nodes, spec.gpus, spec.gpus_per_node) == (2, 8, 4)


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"nodes": 2, "gpus": 3}, "splits the job's GPUs evenly"),
        ({"nodes": 2, "gpus": 0}, "splits the job's GPUs evenly"),
        ({"nodes": 2, "gpus": 2, "distributed": "tf"}, "tf over several nodes"),
        ({"nodes": 2, "gpus": 2, "gpu_mem": "8G"}, "cannot be combined with --nodes"),
        ({"distributed": "torchrun"}, "runs one process per GPU"),
    ],
)
def test_what_cannot_run_is_refused_with_its_reason(fields: dict[str, object], says: str) -> None:
    with pytest.raises(InvalidRequest, match=says):
        _spec(**fields)


def test_gpu_mem_without_gpus_means_one_gpu_at_the_api_too() -> None:
    # The CLI always did this; the rule is the domain's now, so an SDK user gets it as well.
    spec = _spec(gpu_mem="8G")
    assert (spec.gpus, spec.gpu_mem_mib) == (1, 8192)
    assert _spec(gpu_mem="8G", gpus=2).gpus == 2
