"""What the client's proof of the server costs (issue 11): the SDK's `whoami` (the hello
challenge, then the request, on one kept-alive connection) against the same request sent bare
(no proof), on one server, interleaved; p50 in ms, the best of 3 rounds of 300.

    .venv/bin/python bench/hello.py
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from machine import with_machine
from tests.e2e.server import ServerProcess

from gpuyard._http import request


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        _measure(Path(d))


def _measure(tmp: Path) -> None:
    srv = ServerProcess(tmp / "state", "--gpus", "0").start()
    try:
        client = srv.client()
        auth = {"Authorization": f"Bearer {(srv.state_dir / 'token').read_text().strip()}"}

        def bare() -> None:
            request("127.0.0.1", srv.port, "GET", "/api/v1/whoami", auth, None,
                    timeout_s=5).read()  # fmt: skip

        def proved() -> None:
            client.whoami()

        rounds: dict[str, list[float]] = {}
        for _ in range(3):
            for name, call in (("bare_p50_ms", bare), ("with_proof_p50_ms", proved)):
                rounds.setdefault(name, []).append(_p50_ms(call, 300))
        figures = {name: round(min(values), 3) for name, values in rounds.items()}
        figures["proof_cost_ms"] = round(figures["with_proof_p50_ms"] - figures["bare_p50_ms"], 3)
        print(json.dumps(with_machine({"benchmark": "hello", **figures})))
    finally:
        srv.stop()


def _p50_ms(call: Callable[[], None], n: int) -> float:
    times = []
    for _ in range(n):
        began = time.perf_counter()
        call()
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1000


if __name__ == "__main__":
    main()
