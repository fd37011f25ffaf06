"""A stalled PostgreSQL for the stall test and `bench/db_stall.py`: every process of one
cluster (its postmaster and every backend) stopped with SIGSTOP, and always continued.

A stopped database is what a hung disk, a live-migrated VM or a long `pg_dump` lock looks like
to gpuyard: connections stay open, nothing answers, nothing errors. Only a cluster the caller
started itself is stopped (never the shared test server other tests write to).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil


def cluster_processes(data_dir: Path) -> list[psutil.Process]:
    """The postmaster of the cluster in `data_dir` (its pid file's first line) and all its
    children: the backends of every session, the checkpointer, the WAL writer."""
    postmaster = psutil.Process(int((data_dir / "postmaster.pid").read_text().split()[0]))
    return [postmaster, *postmaster.children(recursive=True)]


@contextlib.contextmanager
def stalled(data_dir: Path) -> Iterator[None]:
    """The cluster stopped (SIGSTOP, postmaster first: it forks no new backend meanwhile) for
    the block, then continued (SIGCONT, in a finally: a failed test never leaves it stopped)."""
    procs = cluster_processes(data_dir)
    try:
        for proc in procs:
            proc.send_signal(signal.SIGSTOP)
        yield
    finally:
        for proc in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.send_signal(signal.SIGCONT)


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    seconds: float

    def json(self) -> Any:
        return json.loads(self.body)


def request(
    port: int,
    token: str,
    method: str,
    path: str,
    body: object = None,
    headers: dict[str, str] | None = None,
    timeout_s: float = 60,
) -> Answer:
    """One request on a fresh loopback connection, timed from connect to the last byte."""
    sent = {"Authorization": f"Bearer {token}", **(headers or {})}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        sent["Content-Type"] = "application/json"
    began = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        conn.request(method, path, body=data, headers=sent)
        answer = conn.getresponse()
        payload = answer.read()
        return Answer(answer.status, {k.lower(): v for k, v in answer.getheaders()}, payload,
                      time.perf_counter() - began)  # fmt: skip
    finally:
        conn.close()
