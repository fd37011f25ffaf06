"""Data-parallel training with PyTorch DistributedDataParallel on synthetic data.

Run it through gpuyard, one process per GPU:

    gpuyard submit --gpus 2 --distributed torchrun -- python examples/train_ddp.py --steps 200

torchrun gives every process RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (gpuyard
chooses the port). Each rank trains the same MLP on its own shard of a fixed random regression
problem; DDP averages the gradients. NCCL on GPUs, gloo on CPU (the same script runs on a laptop
with declared GPUs). Rank 0 prints progress and the global throughput (samples/s, all ranks).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=128, help="per rank")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--log-every", type=int, default=25)
    args = parser.parse_args()

    use_cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if use_cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    # One write per line: the ranks share the job's log, and print() writes text and newline
    # separately, so two ranks' lines could interleave.
    sys.stdout.write(f"rank {rank}/{world} local_rank {local_rank} world_size {world} on "
                     f"{device} master {os.environ.get('MASTER_ADDR')}:"
                     f"{os.environ.get('MASTER_PORT')} (CUDA_VISIBLE_DEVICES="
                     f"{os.environ.get('CUDA_VISIBLE_DEVICES', '')!r})\n")
    sys.stdout.flush()

    torch.manual_seed(0)  # the same teacher and initial model on every rank
    features = 32
    teacher = nn.Sequential(nn.Linear(features, 64), nn.Tanh(), nn.Linear(64, 1)).to(device)
    model = nn.Sequential(
        nn.Linear(features, args.hidden), nn.ReLU(),
        nn.Linear(args.hidden, args.hidden), nn.ReLU(),
        nn.Linear(args.hidden, 1),
    ).to(device)  # fmt: skip
    ddp = DistributedDataParallel(model, device_ids=[local_rank] if use_cuda else None)
    optimizer = torch.optim.Adam(ddp.parameters(), lr=args.lr)
    loss_fn = nn.MSELoss()
    generator = torch.Generator(device=device).manual_seed(1000 + rank)  # this rank's shard

    first_loss = None
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        x = torch.randn(args.batch_size, features, device=device, generator=generator)
        with torch.no_grad():
            y = teacher(x)
        loss = loss_fn(ddp(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if first_loss is None:
            first_loss = loss.item()
        if rank == 0 and (step % args.log_every == 0 or step == args.steps):
            rate = step * args.batch_size * world / (time.perf_counter() - start)
            print(f"step {step}/{args.steps} loss {loss.item():.5f} ({rate:,.0f} samples/s)",
                  flush=True)  # fmt: skip
    if use_cuda:
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    if rank == 0:
        print(f"done: loss {first_loss:.5f} -> {loss.item():.5f}; throughput "
              f"{args.steps * args.batch_size * world / elapsed:.1f} samples/s", flush=True)  # fmt: skip
    dist.barrier()  # every rank is done before any leaves
    dist.destroy_process_group()
    # Leave without the interpreter's finalization: with torch 2.13's CPU build, gloo's threads
    # are still torn down there and abort about one rank exit in three ("terminate called
    # without an active exception", exit -6), failing a run that had finished. Nothing is left
    # to flush or close but stdout.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
