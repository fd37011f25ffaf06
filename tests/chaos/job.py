"""The chaos jobs' program (run as `python -S job.py RECORDS SECONDS EXIT_CODE`): stdlib only,
no site, so it starts in a few milliseconds.

It appends what it did to RECORDS/<GPUYARD_JOB_ID>, one line per event, each
`KIND PID MONOTONIC ...` (CLOCK_MONOTONIC is one clock for every process of the machine, so
the records of different jobs can be compared):
- `start PID T GPUS RESTARTS GPU_MEM_MIB` once its SIGTERM handler is in place (GPUS: its
  CUDA_VISIBLE_DEVICES, `-` for none);
- `end PID T CODE` when it is about to exit with its planned code, SIGTERM blocked from then
  on (a stop arriving now changes nothing: the record stays true);
- `stop PID T` when SIGTERM came first (a cancel, a preemption, a drain --now): it exits 0 at
  once, as a training script that saved its checkpoint would.
The interval a record gives is inside the time the process really held its GPUs.
"""

import os
import signal
import sys
import time

RECORDS, SECONDS, CODE = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
PATH = os.path.join(RECORDS, os.environ["GPUYARD_JOB_ID"])
PID = os.getpid()


def record(kind: str, extra: str = "") -> None:
    line = f"{kind} {PID} {time.monotonic():.6f} {extra}".rstrip() + "\n"
    fd = os.open(PATH, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def on_term(_signum: int, _frame: object) -> None:
    record("stop")
    os._exit(0)


signal.signal(signal.SIGTERM, on_term)
gpus = os.environ.get("CUDA_VISIBLE_DEVICES") or "-"
restarts = os.environ.get("GPUYARD_RESTART_COUNT", "0")
record("start", f"{gpus} {restarts} {os.environ.get('GPUYARD_GPU_MEM_MIB', '0')}")
time.sleep(SECONDS)
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
record("end", str(CODE))
os._exit(CODE)
