"""What GPU telemetry costs the server: the sampling thread at 1 Hz over 8 GPUs, in % of one
CPU core (target: at most 1 %).

Runs the server's own sampler (`GpuMonitor` over `NvmlTelemetry`, the real nvidia-ml-py) against
the test suite's fake libnvidia-ml.so.1 in a child process, for two cases: idle GPUs, and
8 GPUs each with one process of a running job (the fake lists them from its state file, the
sampler lists processes every 2 s and traces each to its job through psutil). The fake reads
its state file on every call, which a real driver does not: the second case is a pessimistic
figure. Also counts the NVML calls per sample (the fake counts them).

`--vendor amd`: the same over AMD GPUs (`AmdSmiTelemetry`, AMD's real amdsmi binding against
the test suite's fake libamd_smi.so, 8 MI300X), counting amdsmi calls per sample.

    .venv/bin/python bench/telemetry.py --json
    .venv/bin/python bench/telemetry.py --json --vendor amd
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import with_machine

ROOT = Path(__file__).resolve().parent.parent
GPUS = 8


def child(
    seconds: float, period_s: float, pids: list[tuple[int, int]], history: bool, vendor: str
) -> dict[str, float]:
    """In the process that loaded the fake library: sample for `seconds`, report the cost."""
    import ctypes

    from gpuyard.adapters.gpus.amd import AmdSmiTelemetry, detect_amd_gpus
    from gpuyard.adapters.gpus.nvml import NvmlTelemetry, detect_gpus
    from gpuyard.adapters.gpus.processes import PsutilProcessOwners
    from gpuyard.adapters.store.memory import MemoryJobStore
    from gpuyard.domain.job import Job, JobSpec, NodeCapacity
    from gpuyard.domain.states import JobState
    from gpuyard.services.jobs.book import JobBook
    from gpuyard.services.machine.gpu_history import GpuHistory
    from gpuyard.services.machine.telemetry import GpuMonitor
    from gpuyard.services.scheduler.inventory import Inventory

    gpus = detect_amd_gpus() if vendor == "amd" else detect_gpus()
    jobs = [
        Job(i + 1, JobSpec(("train",), "train", "/", gpus=1), "bench", JobState.RUNNING, 0.0,
            gpus=(i,), started_at=time.time(), pid=supervisor)
        for i, (supervisor, _) in enumerate(pids)
    ]  # fmt: skip
    inventory = Inventory(tuple(gpus), NodeCapacity("bench", 1, 1024), "bench")
    uuids = {gpu.index: gpu.uuid for gpu in gpus}
    source = (lambda: AmdSmiTelemetry(uuids)) if vendor == "amd" else NvmlTelemetry
    monitor = GpuMonitor(source, PsutilProcessOwners(), JobBook(jobs), inventory, period_s=period_s)
    if history:  # as the server wires it: every sample into the GPU history's ring
        monitor.history = GpuHistory(uuids, MemoryJobStore(), period_s=period_s)
    if vendor == "amd":  # the very library amdsmi loaded ($ROCM_PATH/lib)
        lib = ctypes.CDLL(os.path.join(os.environ["ROCM_PATH"], "lib/libamd_smi.so"))
        calls = lib.fake_amdsmi_call_count
    else:
        calls = ctypes.CDLL("libnvidia-ml.so.1").fake_nvml_call_count
    calls.restype = ctypes.c_ulonglong
    monitor.start()
    time.sleep(period_s / 2)  # past NVML init and the first sample
    cpu0, wall0, calls0, cost0 = (
        time.process_time(),
        time.monotonic(),
        calls(),
        monitor.sample_cost_s,
    )
    samples0 = monitor.snapshot.taken_at
    time.sleep(seconds)
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    sampled, made = monitor.sample_cost_s - cost0, calls() - calls0
    snapshot = monitor.snapshot
    monitor.stop()
    samples = max(1, round(wall / period_s))
    attributed = sum(
        1 for g in snapshot.gpus.values() for p in g.processes or () if p.job_id is not None
    )
    assert snapshot.taken_at > samples0, "the sampler did not run"
    return {
        "cpu_pct_of_core": round(100 * cpu / wall, 3),
        "sampler_thread_cpu_pct": round(100 * sampled / wall, 3),
        "ms_per_sample": round(1000 * sampled / samples, 3),
        "nvml_calls_per_sample": round(made / samples, 1),
        "processes_attributed": attributed,
    }


def run_case(
    lib_dir: Path, seconds: float, period_s: float, with_jobs: bool, history: bool,
    vendor: str = "nvidia",
) -> dict[str, float]:  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_NVML_", "FAKE_AMD"))}
    if vendor == "amd":
        env["ROCM_PATH"] = str(lib_dir)
        env["FAKE_AMDSMI_GPUS"] = ";".join(
            f"AMD Instinct MI300X|196592|00ff74a1-0000-1000-8000-bench0000{i:03d}"
            for i in range(GPUS)
        )
    else:
        env["LD_LIBRARY_PATH"] = f"{lib_dir}{os.pathsep}{env.get('LD_LIBRARY_PATH', '')}"
        env["FAKE_NVML_GPUS"] = ";".join(
            f"NVIDIA H100 80GB HBM3|81559|GPU-bench-{i}" for i in range(GPUS)
        )
    supervisors: list[subprocess.Popen[bytes]] = []
    pids: list[tuple[int, int]] = []
    try:
        if with_jobs:
            import psutil

            for _ in range(GPUS):  # a "supervisor" (sh) whose child (sleep) uses the GPU
                sup = subprocess.Popen(["sh", "-c", f"sleep {seconds + 30}; true"])
                supervisors.append(sup)
            for sup in supervisors:
                deadline = time.monotonic() + 5
                while not psutil.Process(sup.pid).children() and time.monotonic() < deadline:
                    time.sleep(0.01)
                pids.append((sup.pid, psutil.Process(sup.pid).children()[0].pid))
            state = Path(tempfile.mkdtemp()) / "gpu_state"
            util, mem = ("gfx_activity", "vram_used_mib") if vendor == "amd" else (
                "util_gpu", "mem_used_mib")  # fmt: skip
            lines = [f"{i} {util} 97\n{i} {mem} 60000\n{i} proc {pid} 59000\n"
                     for i, (_, pid) in enumerate(pids)]  # fmt: skip
            state.write_text("".join(lines))
            env["FAKE_AMDSMI_STATE" if vendor == "amd" else "FAKE_NVML_STATE"] = str(state)
        out = subprocess.run(
            [sys.executable, __file__, "--child",
             json.dumps([seconds, period_s, pids, history, vendor])],
            env=env, capture_output=True, text=True, check=True, timeout=seconds + 60,
        )  # fmt: skip
        return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]
    finally:
        for sup in supervisors:
            sup.kill()
            sup.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--period", type=float, default=1.0, help="sampling interval, s")
    parser.add_argument(
        "--no-history", action="store_true", help="without the GPU history (before issue 14)"
    )
    parser.add_argument("--vendor", choices=("nvidia", "amd"), default="nvidia")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        seconds, period_s, pids, history, vendor = json.loads(args.child)
        print(json.dumps(child(seconds, period_s, [tuple(p) for p in pids], history, vendor)))
        return
    sys.path.insert(0, str(ROOT))
    from tests.fakeamdsmi import build_fake_amdsmi
    from tests.fakenvml import build_fake_nvml

    vendor = args.vendor
    build = build_fake_amdsmi if vendor == "amd" else build_fake_nvml
    lib_dir = build(Path(tempfile.mkdtemp(prefix=f"gpuyard-bench-{vendor}-")))
    history = not args.no_history
    idle = run_case(lib_dir, args.seconds, args.period, False, history, vendor)
    busy = run_case(lib_dir, args.seconds, args.period, True, history, vendor)
    calls = "amdsmi_calls_per_sample" if vendor == "amd" else "nvml_calls_per_sample"
    result = {
        "bench": "telemetry", "gpus": GPUS, "period_s": args.period, "seconds": args.seconds,
        "gpu_history": history, "vendor": vendor,
        "idle_cpu_pct_of_core": idle["cpu_pct_of_core"],
        "busy_cpu_pct_of_core": busy["cpu_pct_of_core"],
        "idle_ms_per_sample": idle["ms_per_sample"],
        "busy_ms_per_sample": busy["ms_per_sample"],
        f"idle_{calls}": idle["nvml_calls_per_sample"],
        f"busy_{calls}": busy["nvml_calls_per_sample"],
        "busy_processes_attributed": busy["processes_attributed"],
        "target_cpu_pct_of_core": 1.0,
    }  # fmt: skip
    if args.json:
        print(json.dumps(with_machine(result, backend=None)))
        return
    for key, value in result.items():
        print(f"{key:>28}: {value}")


if __name__ == "__main__":
    main()
