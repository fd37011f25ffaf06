"""One scheduling pass with memory-aware packing: 1,000 pending jobs on 64 GPUs of 80 GiB.

For each policy the server can run: 8 nodes of 8 GPUs of 80 GiB filled with running jobs of a
mixed workload (whole-GPU jobs of 1, 2, 4 or 8 GPUs; about half the jobs declare 4-40 GiB of GPU
memory (`--gpu-mem`) on 1 GPU, a few on 2, and share GPUs), then 1,000 more queued from the same
mix. After an untimed first pass over the new queue and some untimed warm-up events, it times the
pass that follows each of `--events` job ends (a random running job ends: `end_run` and
`policy.finished`, then `policy.schedule`) and the pass after the queue is topped up to 1,000
again by new submits. The same with no job on shared GPUs (all whole-GPU) is the baseline.
Reports p50 / p99 / max per policy and how many jobs share each shared GPU at the end (it
asserts that passes started jobs and that shared GPUs hold 2 jobs or more on average). Prints
one JSON line with `--json`.

    .venv/bin/python bench/packing.py --json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from datetime import UTC, datetime

from machine import with_machine

from gpuyard.scheduling.cluster import ClusterState, NodeSpec, Placement
from gpuyard.scheduling.policies import make_policy, policy_names
from gpuyard.scheduling.policy import Policy, SchedJob, begin_run, end_run

NODES, GPUS_PER_NODE, GPU_MEM_MIB = 8, 8, 80 * 1024
TARGET_MS = 5.0
# (weight, GPUs, shared): half the jobs on shared GPUs (mostly 1 GPU, a few 2), half whole GPUs.
MIX = [(44, 1, True), (6, 2, True), (30, 1, False), (8, 2, False), (6, 4, False), (6, 8, False)]
WHOLE = [(w, g, False) for w, g, shared in MIX if not shared]  # the baseline: the whole-GPU part
LIMITS_S = [600.0, 3600.0, 86400.0]


class _Ctx:
    """A bare Context as the simulator's and the live server's: starts and preemptions are
    applied to the cluster (`begin_run` / `end_run`) and told to the policy."""

    def __init__(self, cluster: ClusterState, policy: Policy, now: float) -> None:
        self.cluster, self.policy, self.now = cluster, policy, now
        self.running: dict[int, SchedJob] = {}
        self.starts = self.shared_starts = self.preemptions = 0

    def start(self, job: SchedJob, placement: Placement) -> None:
        begin_run(job, self.cluster, placement, self.now)
        self.policy.started(job, self.now)
        self.running[job.id] = job
        self.starts += 1
        self.shared_starts += bool(job.gpu_mem_mib)

    def preempt(self, job: SchedJob) -> None:
        end_run(job, self.cluster, self.now)
        job.restarts += 1
        self.running.pop(job.id, None)
        self.policy.preempted(job, self.now)
        self.preemptions += 1


class _Jobs:
    """Draws jobs of the mix, with deterministic ids, users and sizes."""

    def __init__(self, rng: random.Random, mix: list[tuple[int, int, bool]]) -> None:
        self.rng, self.ids = rng, iter(range(1, 10**9))
        self.kinds = [(g, s) for _, g, s in mix]
        self.weights = [w for w, _, _ in mix]

    def draw(self, submitted_at: float) -> SchedJob:
        rng = self.rng
        gpus, shared = rng.choices(self.kinds, self.weights)[0]
        return SchedJob(next(self.ids), f"u{rng.randrange(20)}", gpus, submitted_at,
                        gpu_mem_mib=rng.randint(4, 40) * 1024 if shared else 0,
                        time_limit_s=rng.choice(LIMITS_S))  # fmt: skip


def packing_stats(ctx: _Ctx) -> tuple[int, float, float]:
    """(shared GPUs, jobs per shared GPU, share of their memory taken) over the running jobs."""
    slots: set[tuple[int, int]] = set()
    memberships, taken_mib = 0, 0
    for job in ctx.running.values():
        held = ctx.cluster.share_of(job.id) if job.gpu_mem_mib else None
        if held is None:
            continue
        node, ids = held
        slots.update((node, slot) for slot in ids)
        memberships += len(ids)
        taken_mib += job.gpu_mem_mib * len(ids)
    if not slots:
        return 0, 0.0, 0.0
    return len(slots), memberships / len(slots), taken_mib / (len(slots) * GPU_MEM_MIB)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(
    name: str, shared: bool, pending: int, events: int, warmup: int, seed: int
) -> dict[str, float | int]:
    rng = random.Random(seed)
    jobs = _Jobs(rng, MIX if shared else WHOLE)
    policy = make_policy(name, for_server=True)
    nodes = [NodeSpec(f"node{i}", GPUS_PER_NODE, gpu_mem_mib=GPU_MEM_MIB) for i in range(NODES)]
    cluster = ClusterState(nodes)
    now = 0.0
    ctx = _Ctx(cluster, policy, now)
    alive: set[int] = set()  # submitted, not finished
    misses = 0
    while misses < 200:  # fill: submit what fits until 200 draws in a row do not
        job = jobs.draw(now)
        if cluster.place(job.gpus, gpu_mem_mib=job.gpu_mem_mib) is None:
            misses += 1
            continue
        misses = 0
        policy.submit(job, now)
        alive.add(job.id)
        policy.schedule(ctx)
        assert job.running, f"{name}: a job that fits did not start while filling"
    assert cluster.free_gpus == 0, f"{name}: the cluster is not full ({cluster.free_gpus} free)"
    filled_running = len(ctx.running)
    filled_packing = packing_stats(ctx)

    now = ctx.now = 7200.0  # running jobs are 2 h old

    def top_up() -> None:
        for _ in range(pending - (len(alive) - len(ctx.running))):
            job = jobs.draw(now - rng.random() * 3600)
            policy.submit(job, now)
            alive.add(job.id)

    top_up()
    t0 = time.perf_counter()
    policy.schedule(ctx)  # the first pass over the whole new queue (may preempt many)
    first_ms = (time.perf_counter() - t0) * 1000

    finish_ms: list[float] = []
    submit_ms: list[float] = []
    started = shared_started = 0
    per_gpu_seen: list[float] = []  # jobs per shared GPU after each timed pass
    for i in range(warmup + events):
        timed = i >= warmup
        now += 5.0
        ctx.now = now
        victim = ctx.running.pop(rng.choice(sorted(ctx.running)))
        end_run(victim, cluster, now)
        policy.finished(victim, now)
        alive.discard(victim.id)
        before, shared_before = ctx.starts, ctx.shared_starts
        t0 = time.perf_counter()
        policy.schedule(ctx)  # the pass after a job's end
        elapsed = (time.perf_counter() - t0) * 1000
        if timed:
            finish_ms.append(elapsed)
            started += ctx.starts - before
            shared_started += ctx.shared_starts - shared_before
            if shared:
                per_gpu_seen.append(packing_stats(ctx)[1])
        now += 5.0
        ctx.now = now
        top_up()
        t0 = time.perf_counter()
        policy.schedule(ctx)  # the pass after the submits that bring the queue back to 1,000
        elapsed = (time.perf_counter() - t0) * 1000
        if timed:
            submit_ms.append(elapsed)

    assert started > 0, f"{name}: the timed passes started no job"
    assert not shared or shared_started > 0, f"{name}: the timed passes started no shared job"
    gpus_shared, per_gpu, mem_taken = packing_stats(ctx)
    mean_per_gpu = statistics.fmean(per_gpu_seen) if per_gpu_seen else 0.0
    if shared:
        assert filled_packing[1] >= 2.0, f"{name}: after the fill {filled_packing[1]:.2f} jobs"
        assert mean_per_gpu >= 2.0, f"{name}: shared GPUs held {mean_per_gpu:.2f} jobs on average"
    else:
        assert gpus_shared == 0
    tag = f"{name}_{'shared' if shared else 'whole'}"
    out: dict[str, float | int] = {
        f"{tag}_after_finish_p50_ms": round(statistics.median(finish_ms), 3),
        f"{tag}_after_finish_p99_ms": round(_pct(finish_ms, 0.99), 3),
        f"{tag}_after_finish_max_ms": round(max(finish_ms), 3),
        f"{tag}_after_submit_p50_ms": round(statistics.median(submit_ms), 3),
        f"{tag}_after_submit_p99_ms": round(_pct(submit_ms, 0.99), 3),
        f"{tag}_first_pass_ms": round(first_ms, 3),
        f"{tag}_started_in_timed_passes": started,
        f"{tag}_preemptions": ctx.preemptions,
        f"{tag}_running_at_end": len(ctx.running),
        f"{tag}_free_gpus_at_end": cluster.free_gpus,
        f"{tag}_pending_at_end": len(alive) - len(ctx.running),
    }
    if shared:
        out.update({
            f"{tag}_shared_started_in_timed_passes": shared_started,
            f"{tag}_running_after_fill": filled_running,
            f"{tag}_shared_gpus_after_fill": filled_packing[0],
            f"{tag}_jobs_per_shared_gpu_after_fill": round(filled_packing[1], 2),
            f"{tag}_jobs_per_shared_gpu_mean": round(mean_per_gpu, 2),
            f"{tag}_shared_gpus_at_end": gpus_shared,
            f"{tag}_jobs_per_shared_gpu_at_end": round(per_gpu, 2),
            f"{tag}_shared_gpu_mem_used_pct_at_end": round(100 * mem_taken, 1),
        })  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--pending", type=int, default=1000)
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    result: dict[str, object] = {
        "benchmark": "packing",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "loadavg_1m_at_start": round(os.getloadavg()[0], 2),
        "pending": args.pending, "gpus": NODES * GPUS_PER_NODE, "nodes": NODES,
        "gpu_mem_gib": GPU_MEM_MIB // 1024, "events": args.events, "target_ms": TARGET_MS,
    }  # fmt: skip
    for name in policy_names(include_oracles=False):
        for shared in (True, False):
            result.update(measure(name, shared, args.pending, args.events, args.warmup, args.seed))
    for kind in ("shared", "whole"):
        p99 = [v for k, v in result.items() if f"_{kind}_after_" in k and k.endswith("_p99_ms")]
        result[f"worst_{kind}_p99_ms"] = max(v for v in p99 if isinstance(v, float))
    if args.json:
        print(json.dumps(with_machine(result, backend=None)))
    else:
        for key, value in result.items():
            print(f"{key:48s} {value}")


if __name__ == "__main__":
    main()
