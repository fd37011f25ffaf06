"""What the supervisor's relay costs an interactive session (issue 13, `gpuyard run`): a
keystroke's round trip and output throughput through the attach socket, the supervisor and the
job's pty, against the same program on a bare pty (the baseline, measured in the same run: a
ratio holds on a noisy machine, an absolute time does not). Each byte the session shows is also
written to the job's log in the relayed case.

    .venv/bin/python bench/interactive.py --json [--keys 300] [--mib 64]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import select
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from machine import with_machine

from gpuyard.adapters.executor.local import LocalExecutor
from gpuyard.cli.attach import connect, frame
from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.states import JobState
from gpuyard.services.launch.plan import launch_plan
from gpuyard.services.ports import ExitStatus

_SIZE = (40).to_bytes(2, "big") + (120).to_bytes(2, "big")


class _Relayed:
    """A session through a real supervisor (LocalExecutor, fork server), seen as a client."""

    def __init__(self, tmp: Path) -> None:
        self.ended = threading.Event()
        self.executor = LocalExecutor(tmp / "jobs", lambda i, s: self._end(s))
        self.next_id = 0
        self.tmp = tmp

    def _end(self, status: ExitStatus) -> None:
        self.ended.set()

    def start(self, argv: tuple[str, ...]) -> socket.socket:
        self.next_id += 1
        self.ended.clear()
        spec = JobSpec(argv=argv, name="b", workdir=str(self.tmp), kind="interactive")
        job = Job(self.next_id, spec, "me", JobState.PENDING, time.time()).transition(
            JobState.RUNNING, started_at=time.time()
        )
        plan = launch_plan(job, {"PATH": "/usr/bin:/bin"}, None, None,
                           self.executor.log_path(job.id))  # fmt: skip
        launched = self.executor.launch(job, plan)
        self.executor.watch(job.with_changes(pid=launched.pid, pid_started_at=launched.started_at))
        path = self.executor.job_dir(job.id) / "attach.sock"
        while True:
            try:
                sock = connect(str(path))
                break
            except (FileNotFoundError, ConnectionRefusedError):
                time.sleep(0.001)
        sock.sendall(frame(b"w", _SIZE))
        return sock


def _frames(sock: socket.socket, pending: bytearray) -> bytes | None:
    """The payload of the data frames that have arrived; None at the connection's end."""
    data = sock.recv(1 << 20)
    if not data:
        return None
    pending += data
    out = bytearray()
    while len(pending) >= 5:
        size = int.from_bytes(pending[1:5], "big")
        if len(pending) < 5 + size:
            break
        out += pending[5 : 5 + size]
        del pending[: 5 + size]
    return bytes(out)


def relayed_keys(bench: _Relayed, keys: int) -> list[float]:
    sock = bench.start(("cat",))
    pending, times = bytearray(), []
    for i in range(keys):
        mark = f"k{i:05d}\n".encode()
        began = time.perf_counter()
        sock.sendall(frame(b"d", mark))
        seen = b""
        while mark.rstrip() not in seen:
            seen += _frames(sock, pending) or b""
        times.append(time.perf_counter() - began)
    sock.sendall(frame(b"d", b"\x04"))
    while _frames(sock, pending) is not None:
        pass
    bench.ended.wait(10)
    return times


def bare_keys(keys: int) -> list[float]:
    master, slave = os.openpty()
    proc = subprocess.Popen(["cat"], stdin=slave, stdout=slave, stderr=slave,
                            start_new_session=True)  # fmt: skip
    os.close(slave)
    times = []
    for i in range(keys):
        mark = f"k{i:05d}\n".encode()
        began = time.perf_counter()
        os.write(master, mark)
        seen = b""
        while mark.rstrip() not in seen:
            seen += os.read(master, 65536)
        times.append(time.perf_counter() - began)
    os.write(master, b"\x04")
    proc.wait()
    os.close(master)
    return times


def relayed_mib_s(bench: _Relayed, mib: int) -> float:
    sock = bench.start(("head", "-c", f"{mib}M", "/dev/zero"))
    pending, got = bytearray(), 0
    began = time.perf_counter()
    while (chunk := _frames(sock, pending)) is not None:
        got += len(chunk)
    took = time.perf_counter() - began
    bench.ended.wait(10)
    return got / took / (1 << 20)


def bare_mib_s(mib: int) -> float:
    master, slave = os.openpty()
    proc = subprocess.Popen(["head", "-c", f"{mib}M", "/dev/zero"], stdout=slave, stderr=slave,
                            stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    os.close(slave)
    got = 0
    began = time.perf_counter()
    while select.select([master], [], [])[0]:
        try:
            data = os.read(master, 1 << 20)
        except OSError:
            break
        if not data:
            break
        got += len(data)
    took = time.perf_counter() - began
    proc.wait()
    os.close(master)
    return got / took / (1 << 20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=300)
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gpuyard-bench-"))
    bench = _Relayed(tmp)
    try:
        relayed = relayed_keys(bench, args.keys)
        bare = bare_keys(args.keys)
        relayed_tput = relayed_mib_s(bench, args.mib)
        bare_tput = bare_mib_s(args.mib)
    finally:
        bench.executor.close()
        shutil.rmtree(tmp, ignore_errors=True)
    med_r, med_b = statistics.median(relayed), statistics.median(bare)
    p99 = sorted(relayed)[int(len(relayed) * 0.99) - 1]
    result = {
        "bench": "interactive",
        "keys": args.keys,
        "key_round_trip_ms_median": round(med_r * 1000, 3),
        "key_round_trip_ms_p99": round(p99 * 1000, 3),
        "bare_pty_round_trip_ms_median": round(med_b * 1000, 3),
        "round_trip_ratio": round(med_r / med_b, 2),
        "output_mib_s": round(relayed_tput, 1),
        "bare_pty_output_mib_s": round(bare_tput, 1),
        "output_ratio": round(relayed_tput / bare_tput, 2),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    if args.json:
        print(json.dumps(with_machine(result)))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
