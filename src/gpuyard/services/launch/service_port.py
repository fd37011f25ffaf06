"""A service's port: chosen once, at submit, and kept for the service's whole life.

`gpuyard serve --port auto` submits a service with `service_port` 0; the server picks a port
that is free on its machine now and that no other pending or running service holds, and writes
it into the job's spec before the job is stored. So the port survives every restart of the
service (a crash, a health check's restart, a preemption) and of the server (the spec is in the
database), and `serve` can print a stable address at once:

    assign(JobSpec(kind="service", service_port=0, ...)) -> JobSpec(..., service_port=23817)

Ports are drawn from below Linux's ephemeral range (32768-60999): a port the kernel hands out
for outgoing connections could be taken by one while the service is down between two runs. A
port another service already holds is refused for an explicit `--port` too, in one line.
"""

from __future__ import annotations

import random
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from gpuyard.domain.errors import Conflict
from gpuyard.domain.job import JobSpec
from gpuyard.services.ports import LiveJobs

PORT_RANGE = (20000, 32767)
_TRIES = 200
# A port given at submit but whose job is not in the book yet (its write is under way) is
# kept from other submits this long.
_RECENT_S = 600.0


def port_free(port: int) -> bool:
    """Nothing listens on `port` (any address) and nothing holds it bound now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True


class ServicePorts:
    """Chooses and checks services' ports against the book's pending and running services."""

    def __init__(
        self,
        book: LiveJobs,
        *,
        is_free: Callable[[int], bool] = port_free,
        rng: random.Random | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._book = book
        self._is_free = is_free
        self._rng = rng or random.Random()
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._recent: dict[int, float] = {}  # port -> when it was given (monotonic)

    def assign(self, spec: JobSpec) -> JobSpec:
        """`spec` with its port: a service that asked for any gets a free one; one that named
        a port another service holds is refused (Conflict). Other jobs are returned as they are."""
        if spec.kind != "service":
            return spec
        return self.assign_many([spec])[0]

    def assign_many(self, specs: Sequence[JobSpec]) -> list[JobSpec]:
        """`assign` for the tasks of one array: each service its own port."""
        if all(spec.kind != "service" for spec in specs):
            return list(specs)
        with self._lock:
            held = self._held()
            assigned = []
            for spec in specs:
                if spec.kind == "service":
                    spec = self._assign(spec, held)
                    held[spec.service_port] = "another task of this array"
                assigned.append(spec)
            now = self._monotonic()
            for spec, asked in zip(assigned, specs, strict=True):
                if asked.kind == "service" and not asked.service_port:
                    self._recent[spec.service_port] = now
            return assigned

    def _assign(self, spec: JobSpec, held: dict[int, int | str]) -> JobSpec:
        if spec.service_port:
            owner = held.get(spec.service_port)
            if owner is not None:
                raise Conflict(
                    f"port {spec.service_port} is held by service {owner}: choose another "
                    "port, or --port auto"
                )
            return spec
        return replace(spec, service_port=self._choose(held))

    def _held(self) -> dict[int, int | str]:
        """Ports of pending and running services (port -> job id), and those just given."""
        now = self._monotonic()
        for port in [p for p, at in self._recent.items() if now - at > _RECENT_S]:
            del self._recent[port]
        held: dict[int, int | str] = dict.fromkeys(self._recent, "just submitted")
        for job in self._book.jobs(include_finished=False):
            if job.spec.kind == "service" and job.spec.service_port:
                held[job.spec.service_port] = job.id
        return held

    def _choose(self, held: dict[int, int | str]) -> int:
        low, high = PORT_RANGE
        for _ in range(_TRIES):
            port = self._rng.randint(low, high)
            if port not in held and self._is_free(port):
                return port
        raise Conflict(
            f"no free port for the service in {low}-{high} after {_TRIES} tries: give one "
            "with --port"
        )
