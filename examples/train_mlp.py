"""A small PyTorch training run on synthetic data: what `make run` shows gpuyard running.

Uses the GPU gpuyard gave the job (CUDA_VISIBLE_DEVICES) when there is one, the CPU otherwise,
and prints its step, loss and throughput so `gpuyard logs -f` shows progress; it also reports
them with `gpuyard.progress()` (the step every step, the loss with each printed line), which
`gpuyard wait`, `show`, the dashboard and `/metrics` read. No downloads: the data is a fixed
random regression problem the MLP can learn.

Checkpoint and resume, as a preemptible job should: the model, the optimizer and the step are
saved to GPUYARD_CHECKPOINT_DIR (the job's folder, kept across its runs) every
`--checkpoint-every` steps and when a signal comes: SIGTERM (gpuyard's stop signal: a
preemption, a cancel, the time limit) saves and exits 0, SIGUSR1 (`--signal USR1@120`: the time
limit is near) saves and goes on. At start it loads the last checkpoint there and says
"resumed from step N". Each step's batch is drawn from a generator seeded by the step, so a
resumed run sees the data an uninterrupted one would have.
"""

from __future__ import annotations

import argparse
import os
import signal
import time

_signals = {"SIGTERM": False, "SIGUSR1": False}  # came, not handled yet (the loop saves)


def _note(signum: int, frame: object) -> None:
    _signals[signal.Signals(signum).name] = True


# Before torch's import (a second or two): a stop that comes meanwhile is heard, not fatal.
signal.signal(signal.SIGTERM, _note)
signal.signal(signal.SIGUSR1, _note)

import torch  # noqa: E402
from torch import nn  # noqa: E402

try:
    from gpuyard import progress  # a no-op outside gpuyard; never raises
except ImportError:  # run without gpuyard installed

    def progress(step: int, total: int | None = None, **metrics: float) -> None:
        pass


CHECKPOINT = "train_mlp.pt"


def save(folder: str, model: nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
    """Atomically: a checkpoint cut short by SIGKILL never replaces a whole one."""
    path = os.path.join(folder, CHECKPOINT)
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)


def load(folder: str, model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """The step of the last checkpoint in `folder`, its model and optimizer loaded; 0: none."""
    path = os.path.join(folder, CHECKPOINT)
    if not os.path.exists(path):
        return 0
    state = torch.load(path, map_location="cpu")
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return int(state["step"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--log-every", type=int, default=25)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint-every", type=int, default=100, help="0: only on signals")
    parser.add_argument(
        "--checkpoint-dir", default=os.environ.get("GPUYARD_CHECKPOINT_DIR"),
        help="default: GPUYARD_CHECKPOINT_DIR; none: no checkpoints",
    )  # fmt: skip
    parser.add_argument(
        "--step-delay", type=float, default=0.0, help="seconds of extra work per step (tests)"
    )
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    job = os.environ.get("GPUYARD_JOB_ID", "-")
    gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    print(f"job {job}: training on {device} (CUDA_VISIBLE_DEVICES={gpus!r})", flush=True)

    features, targets = 32, 1
    teacher = nn.Sequential(nn.Linear(features, 64), nn.Tanh(), nn.Linear(64, targets)).to(device)
    model = nn.Sequential(
        nn.Linear(features, args.hidden), nn.ReLU(),
        nn.Linear(args.hidden, args.hidden), nn.ReLU(),
        nn.Linear(args.hidden, targets),
    ).to(device)  # fmt: skip
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.MSELoss()
    folder = args.checkpoint_dir
    first = 1
    if folder:
        os.makedirs(folder, exist_ok=True)
        done = load(folder, model, optimizer)
        if done:
            print(f"resumed from step {done}", flush=True)
        first = done + 1

    def checkpoint(step: int, why: str) -> None:
        if folder:
            save(folder, model, optimizer, step)
            print(f"checkpoint saved at step {step} ({why})", flush=True)

    start = time.perf_counter()
    loss = torch.zeros(())
    step = first - 1  # the last step done
    while step < args.steps and not _signals["SIGTERM"]:
        step += 1
        data = torch.Generator(device=device).manual_seed(args.seed * 1_000_003 + step)
        x = torch.randn(args.batch_size, features, device=device, generator=data)
        with torch.no_grad():
            y = teacher(x)
        loss = loss_fn(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if args.step_delay:
            time.sleep(args.step_delay)
        if step % args.log_every == 0 or step == args.steps:
            rate = (step - first + 1) * args.batch_size / (time.perf_counter() - start)
            print(
                f"step {step}/{args.steps} loss {loss.item():.5f} ({rate:,.0f} samples/s)",
                flush=True,
            )
            progress(step, total=args.steps, loss=loss.item(), samples_per_s=rate)
        else:
            progress(step, total=args.steps)  # no loss.item(): no GPU sync every step
        if _signals["SIGUSR1"]:  # the time limit is near: save now, go on
            _signals["SIGUSR1"] = False
            checkpoint(step, "SIGUSR1: the time limit is near")
        elif args.checkpoint_every and step % args.checkpoint_every == 0:
            checkpoint(step, f"every {args.checkpoint_every} steps")
    if _signals["SIGTERM"]:  # stopped (preempted, cancelled, the limit): save and leave
        if step >= first:
            checkpoint(step, "SIGTERM: stopping")
        return
    print(f"done: final loss {loss.item():.5f} in {time.perf_counter() - start:.1f}s", flush=True)


if __name__ == "__main__":
    main()
