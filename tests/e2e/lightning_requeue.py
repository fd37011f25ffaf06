"""A tiny Lightning model on synthetic data under Lightning's own Slurm auto-requeue (its
SLURMEnvironment, found from the job's SLURM_* variables): the run that gets the warning saves
its hpc checkpoint and calls `scontrol requeue`; the next run resumes from it, and ends."""

import os
import signal
import sys
import time

# The warning is held until the run has trained 3 steps (a loaded machine may take longer to
# import torch than the warning takes to come): the checkpoint then holds progress to resume.
# A run that resumed ends after 2 steps, before it would take the warning.
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})

import pytorch_lightning as pl  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

RUN = int(os.environ["SLURM_RESTART_COUNT"])


class Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, _):
        time.sleep(0.05)
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Runs(pl.Callback):
    def on_train_start(self, trainer, module):
        self.first = trainer.global_step
        print(f"run {RUN} starts at step {self.first}", flush=True)

    def on_train_batch_end(self, trainer, *_):
        if RUN > 0 and trainer.global_step >= self.first + 2:
            trainer.should_stop = True
        elif trainer.global_step == self.first + 3:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})


data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
trainer = pl.Trainer(
    default_root_dir=sys.argv[1],
    max_epochs=10000,
    accelerator="cpu",
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
    callbacks=[Runs()],
)
trainer.fit(Tiny(), DataLoader(data, batch_size=8))
print(f"run {RUN} ends at step {trainer.global_step}", flush=True)
