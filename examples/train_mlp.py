"""A small PyTorch training run on synthetic data: what `make run` shows gpuyard running.

Uses the GPU gpuyard gave the job (CUDA_VISIBLE_DEVICES) when there is one, the CPU otherwise,
and prints its step, loss and throughput so `gpuyard logs -f` shows progress. No downloads: the
data is a fixed random regression problem the MLP can learn.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--log-every", type=int, default=25)
    parser.add_argument("--seed", type=int, default=0)
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

    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        x = torch.randn(args.batch_size, features, device=device)
        with torch.no_grad():
            y = teacher(x)
        loss = loss_fn(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % args.log_every == 0 or step == args.steps:
            elapsed = time.perf_counter() - start
            rate = step * args.batch_size / elapsed
            print(
                f"step {step}/{args.steps} loss {loss.item():.5f} ({rate:,.0f} samples/s)",
                flush=True,
            )
    print(f"done: final loss {loss.item():.5f} in {time.perf_counter() - start:.1f}s", flush=True)


if __name__ == "__main__":
    main()
