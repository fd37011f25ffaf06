"""Progress end to end: a real server reads a real job's tqdm bar (step, total, rate, ETA,
postfix metrics; `unit_scale`'s `3.40M/12.0M` counts too) and shows it at `GET /progress`,
`/series` and `/metrics`; a real Lightning `fit` with its default progress bar (Rich's, rich
being installed) gives its batches, epoch and loss, in a log file and on a terminal; a real
transformers 5 Trainer its steps and the metrics it logs (floats printed as strings); on a root
server the progress file is the job's user's own, which the job (as that user) writes through
the SDK."""

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
from tests.e2e.server import ServerProcess, wait_ended, wait_for
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


SCALED_TQDM_JOB = (
    "import time\n"
    "from tqdm import tqdm\n"
    "bar = tqdm(total=12_000_000, unit='B', unit_scale=True, desc='download')\n"
    "for _ in range(600):\n"
    "    time.sleep(0.05)\n"
    "    bar.update(20_000)\n"
)


def test_a_unit_scaled_tqdm_bar_gives_its_step_and_total(server: ServerProcess) -> None:
    """`unit_scale=True` prints `3.40M/12.0M [..., 1.20MB/s]`: read at its printed precision."""
    job_id = int(server.cli("submit", "--", sys.executable, "-c", SCALED_TQDM_JOB).stdout)
    client = server.client()
    try:
        progress = wait_for(
            # tqdm prints its ETA (`<?` at first) once it knows a rate: wait for one with it.
            lambda: (got := client.progress(job_id)) and (got["step"] or 0) >= 200_000
            and got["eta_s"] is not None and got,
            timeout_s=60, interval_s=0.2,
        )  # fmt: skip
        assert progress["total"] == 12_000_000 and progress["source"] == "tqdm"
        assert 0 < progress["fraction"] < 1
    finally:
        server.cli("cancel", str(job_id), check=False)


# A Lightning fit on synthetic data with Lightning's default progress bar: with rich installed
# (gpuyard installs it) that is RichProgressBar. 3 epochs of 32 batches, 50 ms a batch.
LIGHTNING_JOB = """
import time, torch, pytorch_lightning as pl
from torch.utils.data import DataLoader, TensorDataset
class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
    def training_step(self, batch, index):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss, prog_bar=True)
        time.sleep(0.05)
        return loss
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)
data = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=2)
trainer = pl.Trainer(max_epochs=3, logger=False, enable_checkpointing=False,
                     enable_model_summary=False, accelerator="cpu", devices=1)
print("bar:", type(trainer.progress_bar_callback).__name__, flush=True)
trainer.fit(Model(), data)
"""


def test_a_lightning_fit_with_its_default_rich_bar_shows_its_progress(
    server: ServerProcess,
) -> None:
    """In a log file Rich draws only the bar's last state, at the fit's end: the job's final
    batches, epoch and loss. With Rich's own switch for a terminal (TTY_COMPATIBLE=1, as on a
    pty) each refresh is read as it comes: progress while the job runs."""
    pytest.importorskip("pytorch_lightning")
    pytest.importorskip("rich")
    submit = ("submit", "--", sys.executable, "-c", LIGHTNING_JOB)
    in_a_file = int(server.cli(*submit).stdout)
    live = int(server.cli("submit", "--env", "TTY_COMPATIBLE=1", *submit[1:]).stdout)
    client = server.client()
    try:
        running = wait_for(
            lambda: (got := client.progress(live)) and 0 < (got["step"] or 0) < 32 and got,
            timeout_s=240, interval_s=0.2,
        )  # fmt: skip
        assert client.job(live)["state"] == "RUNNING"
        assert running["total"] == 32 and running["source"] == "lightning"
        assert "train_loss" in running["metrics"] and "epoch" in running["metrics"]
        for job_id in (in_a_file, live):
            assert wait_ended(client, job_id, timeout_s=240)["state"] == "COMPLETED"
            final = wait_for(
                lambda j=job_id: (got := client.progress(j)) and got["step"] == 32 and got,
                timeout_s=30, interval_s=0.2,
            )  # fmt: skip
            assert final["total"] == 32 and final["source"] == "lightning", final
            assert final["metrics"]["epoch"] == 2.0 and final["metrics"]["train_loss"] >= 0
            assert "v_num" not in final["metrics"]
        assert "bar: RichProgressBar" in server.cli("logs", str(in_a_file)).stdout
    finally:
        for job_id in (in_a_file, live):
            server.cli("cancel", str(job_id), check=False)


# A real transformers Trainer on a model built here (no hub): its tqdm bar and, every 2 steps,
# its logged dict, which transformers 5 prints with floats as strings ({'loss': '1.656', ...}).
TRAINER_JOB = """
import tempfile, torch
from transformers import Trainer, TrainingArguments
class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
    def forward(self, x, labels=None):
        out = self.layer(x)
        return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}
data = [{"x": torch.randn(4), "labels": torch.randn(1)} for _ in range(64)]
args = TrainingArguments(output_dir=tempfile.mkdtemp(), max_steps=40, logging_steps=2,
                         per_device_train_batch_size=4, report_to="none", use_cpu=True,
                         save_strategy="no")
Trainer(model=Tiny(), args=args, train_dataset=data).train()
"""


def test_a_transformers_trainer_gives_its_steps_and_its_logged_metrics(
    server: ServerProcess,
) -> None:
    transformers = pytest.importorskip("transformers")
    assert int(transformers.__version__.split(".")[0]) >= 5, transformers.__version__
    job_id = int(server.cli("submit", "--", sys.executable, "-c", TRAINER_JOB).stdout)
    client = server.client()
    try:
        assert wait_ended(client, job_id, timeout_s=240)["state"] == "COMPLETED"
        final = wait_for(
            lambda: (got := client.progress(job_id)) and "train_loss" in got["metrics"] and got,
            timeout_s=30, interval_s=0.2,
        )  # fmt: skip
        assert (final["step"], final["total"]) == (40, 40)
        metrics = final["metrics"]
        assert {"loss", "grad_norm", "learning_rate", "epoch"} <= set(metrics), metrics
        assert 0 < metrics["learning_rate"] < 1e-4 and metrics["epoch"] == 2.5
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
