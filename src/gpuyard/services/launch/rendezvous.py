"""Rendezvous ports for distributed jobs: one per running job, never shared.

torchrun's default port (29500) would make two concurrent jobs join each other's rendezvous.
The port comes from the operating system (a free port, `bind(0)`), and is kept out of reach of
every other job gpuyard launches until its job ends.
"""

from __future__ import annotations

import socket
import threading


class RendezvousPorts:
    """Free loopback ports handed to running jobs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_job: dict[int, int] = {}

    def take(self, job_id: int) -> int:
        with self._lock:
            held = set(self._by_job.values())
            for _ in range(100):
                port = _free_port()
                if port not in held:
                    self._by_job[job_id] = port
                    return port
        raise RuntimeError("no free port for the job's rendezvous")

    def release(self, job_id: int) -> None:
        with self._lock:
            self._by_job.pop(job_id, None)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])
