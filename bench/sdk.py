"""What the SDK's typed records and function jobs cost (issue 24): decoding a 10,000-job page
as plain dicts against as `Job` records (the copy into a dict subclass), and, on one server,
a trivial function's submit-to-result (`submit_function(...).result()`) against a plain
`python -c pass` job's submit-to-end (`wait`), interleaved; medians in ms.

    .venv/bin/python bench/sdk.py [--rounds 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from machine import with_machine
from tests.e2e import sdk_functions
from tests.e2e.server import ServerProcess

from gpuyard.schemas.v1 import JobOut
from gpuyard.sdk.records import jobs_of


def records() -> dict[str, float]:
    row = {name: i for i, name in enumerate(JobOut.model_fields)}
    row.update(id=1, command=["python", "train.py"], gpus=[0], attempts=[], retry_on=[])
    page = json.dumps([row] * 10_000)
    plain = min(timeit.repeat(lambda: json.loads(page), number=1, repeat=15))
    typed = min(timeit.repeat(lambda: jobs_of(json.loads(page)), number=1, repeat=15))
    return {
        "page_10k_dicts_ms": round(plain * 1e3, 1),
        "page_10k_jobs_ms": round(typed * 1e3, 1),
        "wrap_us_per_job": round((typed - plain) / 10_000 * 1e6, 2),
    }


def jobs(rounds: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        srv = ServerProcess(Path(d) / "state", "--gpus", "1").start()
        try:
            client = srv.client()
            plain, function = [], []
            for _ in range(rounds):
                began = time.perf_counter()
                client.wait(client.submit([sys.executable, "-c", "pass"]), poll_s=0.02)
                plain.append(time.perf_counter() - began)
                began = time.perf_counter()
                handle = client.submit_function(sdk_functions.power, 2, 3, folder=d)
                assert handle.result(poll_s=0.02) == 8
                function.append(time.perf_counter() - began)
        finally:
            srv.stop()
    p, f = statistics.median(plain) * 1e3, statistics.median(function) * 1e3
    return {"plain_job_p50_ms": round(p, 1), "function_job_p50_ms": round(f, 1),
            "function_over_plain": round(f / p, 2)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    print(json.dumps(with_machine({"benchmark": "sdk", **records(), **jobs(args.rounds)})))


if __name__ == "__main__":
    main()
