"""Progress end to end: a real server reads a real job's tqdm bar (step, total, rate, ETA,
postfix metrics) and shows it at `GET /progress`, `/series` and `/metrics`; on a root server the
progress file is the job's user's own, which the job (as that user) writes through the SDK."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

import gpuyard
from gpuyard.adapters.identity import unix_identity
from gpuyard.services.launch.run_as import RunAsPolicy
from tests.e2e.executor_rig import Rig
from tests.e2e.server import ServerProcess, wait_for
from tests.e2e.unix_users import unix_users

pytest.importorskip("tqdm")

TQDM_JOB = (
    "import time\n"
    "from tqdm import tqdm\n"
    "bar = tqdm(total=600, desc='train')\n"
    "for step in range(600):\n"
    "    time.sleep(0.05)\n"
    "    bar.set_postfix(loss=1 / (step + 1), refresh=False)\n"
    "    bar.update(1)\n"
)


def test_a_real_server_shows_a_tqdm_jobs_step_total_and_eta(server: ServerProcess) -> None:
    job_id = int(server.cli("submit", "--", sys.executable, "-c", TQDM_JOB).stdout)
    client = server.client()
    try:

        def moving() -> dict[str, object] | None:
            got = client.progress(job_id)
            ok = got is not None and (got["step"] or 0) >= 40 and got["eta_s"] is not None
            return got if ok else None

        progress = wait_for(moving, timeout_s=60, interval_s=0.2)
        assert progress["total"] == 600 and progress["source"] == "tqdm"
        assert 0 < progress["fraction"] < 1
        assert progress["rate_per_s"] > 0 and progress["eta_s"] > 0
        assert 0 < progress["metrics"]["loss"] < 1
        series = client.series(job_id, ["step", "loss"])
        assert series is not None and set(series["series"]) == {"step", "loss"}
        metrics_token = (server.state_dir / "metrics-token").read_text().strip()
        request = urllib.request.Request(
            f"{server.url}/metrics", headers={"Authorization": f"Bearer {metrics_token}"}
        )
        text = urllib.request.urlopen(request, timeout=10).read().decode()
        lines = [line for line in text.splitlines() if f'hpc_job="{job_id}"' in line]
        assert any(line.startswith("gpuyard_job_progress_total{") for line in lines), text
        assert any(line.startswith("gpuyard_job_metric{") and 'name="loss"' in line
                   for line in lines), text  # fmt: skip
    finally:
        server.cli("cancel", str(job_id), check=False)


@pytest.fixture
def rig() -> Iterator[Rig]:
    state = Path(tempfile.mkdtemp(prefix="gpuyard-progress-", dir="/tmp"))
    state.chmod(0o711)
    r = Rig(state)
    yield r
    r.executor.close()
    shutil.rmtree(state, ignore_errors=True)


def test_the_progress_file_is_the_jobs_users_own_and_the_job_writes_it(rig: Rig) -> None:
    with unix_users() as users:
        run_as = RunAsPolicy(unix_identity, 0, "root").for_owner(users.alice)
        # The SDK is the standard library only: any Python of the job's runs it (the test's
        # virtualenv is root's; the package's two files are copied where alice can read them).
        sdk_dir = rig.tmp / "sdk" / "gpuyard"
        sdk_dir.mkdir(parents=True)
        for name in ("__init__.py", "_progress.py"):
            shutil.copy(Path(gpuyard.__file__).parent / name, sdk_dir / name)
        for folder in (sdk_dir, sdk_dir.parent):
            folder.chmod(0o755)
        python = "/usr/bin/python3"  # the system's, which every user may run
        if not os.access(python, os.X_OK):
            pytest.skip("no /usr/bin/python3")
        code = "import gpuyard; gpuyard.progress(3, total=5, loss=0.5)"
        sdk = f"PYTHONPATH={sdk_dir.parent} {python} -c '{code}'"
        script = f'{sdk} || echo sdk-failed; echo "file=$GPUYARD_PROGRESS_FILE"'
        rig.start(1, script, run_as=run_as, workdir=Path("/"))
        assert rig.wait_end(1).exit_code == 0, rig.log(1)
        path = rig.executor.job_dir(1) / "progress.jsonl"
        assert rig.log(1).splitlines()[-1] == f"file={path}"
        info = os.stat(path)
        assert (pwd.getpwuid(info.st_uid).pw_name, stat.S_IMODE(info.st_mode)) == (
            users.alice, 0o600,
        )  # fmt: skip
        assert "sdk-failed" not in rig.log(1), rig.log(1)
        (line,) = path.read_text().splitlines()
        record = json.loads(line)
        assert (record["step"], record["total"], record["metrics"]) == (3, 5, {"loss": 0.5})
