"""What one job list costs the server (issue 27): building and encoding the answer of
`GET /api/v1/jobs` for `--jobs` jobs (200: `gpuyard queue` on a busy box; 10,000: the whole
page), the way the route does it now (field dicts, `api/wire_json.py`) and the way it did
before (a JobOut model a job, TypeAdapter's dump_json), alternating in one run, on a real
server's book (in-process: the route's own functions, no HTTP).

    .venv/bin/python bench/job_list.py [--jobs 200] [--rounds 50] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path

from machine import with_machine
from pydantic import TypeAdapter

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fastapi.testclient import TestClient

from gpuyard.api import convert
from gpuyard.api.routers import jobs as job_routes
from gpuyard.bootstrap import build_app
from gpuyard.domain.states import JobState
from gpuyard.schemas.v1 import JobOut
from gpuyard.settings import Settings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=200, help="jobs in the list (all but one pend)")
    ap.add_argument("--rounds", type=int, default=50, help="lists built per way")
    ap.add_argument("--json", action="store_true", help="one JSON line")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpuyard-job-list-") as tmp:
        settings = Settings(state_dir=Path(tmp) / "state", gpus="1", cpus=4, kill_grace_s=1)
        server, app = build_app(settings)
        with TestClient(app, base_url=settings.url) as client:
            client.headers["Authorization"] = f"Bearer {settings.token_path.read_text().strip()}"
            body = {"command": ["sleep", "600"], "gpus": 1, "workdir": tmp}
            for _ in range(args.jobs):
                assert client.post("/api/v1/jobs", json=body).status_code == 201
            admin = server.auth.principal
            jobs = server.reads.list_jobs(admin, include_finished=False)
            pending = [job.id for job in jobs if job.state is JobState.PENDING]
            estimates = server.scheduler.start_estimates(pending)
            models = TypeAdapter(list[JobOut])

            def now_way() -> bytes:
                listed = [job_routes._listed(server, admin, job, estimates) for job in jobs]
                return job_routes._JOB_LIST.dump_json(listed)

            def models_way() -> bytes:
                return models.dump_json([job_routes._out(server, job, estimates) for job in jobs])

            # The same answer, at one instant (a running job's runtime is read off the clock).
            clock, frozen = convert.time, time.time()
            convert.time = types.SimpleNamespace(time=lambda: frozen)  # type: ignore[assignment]
            same = now_way() == models_way()
            convert.time = clock
            times: dict[str, list[float]] = {"fields": [], "models": []}
            for _ in range(args.rounds):
                for name, way in (("fields", now_way), ("models", models_way)):
                    started = time.perf_counter()
                    way()
                    times[name].append((time.perf_counter() - started) * 1000)
            for job in server.reads.list_jobs(admin, include_finished=False):
                server.verbs.cancel(job.id, admin)
    result = {
        "bench": "job_list",
        "jobs": len(jobs),
        "rounds": args.rounds,
        "same_answer": same,
        "fields_p50_ms": round(statistics.median(times["fields"]), 3),
        "models_p50_ms": round(statistics.median(times["models"]), 3),
        "fields_us_per_job": round(statistics.median(times["fields"]) * 1000 / len(jobs), 1),
        "models_us_per_job": round(statistics.median(times["models"]) * 1000 / len(jobs), 1),
    }
    result = with_machine(result)
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
