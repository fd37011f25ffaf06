"""One throw-away Debian Slurm and one gpuyard server on 4 GPUs for the whole package: the
side-by-side tests run each script on both. Slurm is installed (apt-get, by `make test` or
bench/slurm/setup.sh) where it is missing; only where it cannot be (not root, no apt-get)
do they skip, and under CI they fail."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.server import ServerProcess
from tests.needs import missing
from tests.slurm_side.real_slurm import RealSlurm, path_with_sbin, slurm_installed, throwaway_slurm

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="session")
def slurm() -> Iterator[RealSlurm]:
    if not slurm_installed() and (os.geteuid() != 0 or not shutil.which("apt-get",
                                                                        path=path_with_sbin())):
        missing("Debian's slurm-wlm is not installed and cannot be here (needs root and apt-get)",
                "the side-by-side tests against Slurm", "run make test as root")  # fmt: skip
    if os.geteuid() != 0:
        missing("the throw-away Slurm needs root (slurmd launches the jobs)",
                "the side-by-side tests against Slurm", "run make test as root")  # fmt: skip
    workdir = Path(tempfile.mkdtemp(prefix="gpuyard-slurm-side-"))
    try:
        with throwaway_slurm(workdir) as cluster:
            yield cluster
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def gpuyard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    state = tmp_path_factory.mktemp("gpuyard-side") / "state"
    srv = ServerProcess(state, "--gpus", "4", "--cpus", "8", "--kill-grace", "1")
    srv.start()
    yield srv
    srv.stop()
    srv.kill_jobs()
