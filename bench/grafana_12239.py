"""Which panels of Grafana dashboard 12239 (dcgm-exporter's own "NVIDIA DCGM Exporter
Dashboard", grafana/dcgm-exporter-dashboard.json) show data from gpuyard's /metrics, and whether
its sum panel counts a shared GPU once (issue 24).

A real server over the test suite's fake libnvidia-ml (2 H200: one whole-GPU job, and two
`--gpu-mem` jobs sharing the other GPU; GPM on, as on Hopper). Each panel's query is evaluated
here on one scrape, the way Prometheus would on an instant: the family it reads, its label
filters (`Hostname=~".*"`, `gpu=~".*"`, which need the labels to exist), then its aggregation.
A panel "shows data" when its query gives at least one value. "GPU Power Total"
(`sum(max(DCGM_FI_DEV_POWER_USAGE) by (gpu))`), a plain `sum(DCGM_FI_DEV_POWER_USAGE)` and "GPU
Avg. Temp" (`avg(DCGM_FI_DEV_GPU_TEMP)`) are compared with what the fake's GPUs draw and read.

    .venv/bin/python bench/grafana_12239.py --json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import urllib.request
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from machine import with_machine
from prometheus_client.parser import text_string_to_metric_families
from tests.e2e.server import ServerProcess, wait_for
from tests.fakenvml import build_fake_nvml, fake_nvml_env, write_fake_nvml_state

H200 = [("NVIDIA H200", 143771, f"GPU-0000000{i}-aaaa-bbbb-cccc-000000000000") for i in range(2)]
DRAW_MW = (612_000, 549_000)
TEMP_C = (71, 40)
STATE = {
    i: {"util_gpu": 83, "mem_used_mib": 5000, "temp_c": TEMP_C[i], "power_mw": DRAW_MW[i],
        "tensor_pct": 37, "gr_engine_pct": 88}
    for i in range(2)
}  # fmt: skip

Samples = list[tuple[dict[str, str], float]]


def _max_by(samples: Samples, keys: tuple[str, ...]) -> dict[tuple[str, ...], float]:
    out: dict[tuple[str, ...], float] = {}
    for labels, value in samples:
        key = tuple(labels.get(k, "") for k in keys)
        out[key] = max(value, out.get(key, value))
    return out


def _filtered(families: dict[str, Samples], name: str) -> Samples:
    """`name{Hostname=~".*", gpu=~".*"}`: the series carrying both labels."""
    return [(labels, v) for labels, v in families.get(name, []) if "Hostname" in labels
            and "gpu" in labels]  # fmt: skip


Panel = tuple[str, str, Callable[[Samples], list[float]]]


def _per_gpu(keys: tuple[str, ...]) -> Callable[[Samples], list[float]]:
    return lambda samples: list(_max_by(samples, keys).values())


PANELS: tuple[Panel, ...] = (
    ("GPU Temperature", "DCGM_FI_DEV_GPU_TEMP", _per_gpu(("Hostname", "gpu", "uuid"))),
    ("GPU Avg. Temp", "DCGM_FI_DEV_GPU_TEMP",
     lambda s: [sum(v for _, v in s) / len(s)] if s else []),
    ("GPU Power Usage", "DCGM_FI_DEV_POWER_USAGE", _per_gpu(("Hostname", "gpu", "uuid"))),
    ("GPU Power Total", "DCGM_FI_DEV_POWER_USAGE",
     lambda s: [sum(_max_by(s, ("gpu",)).values())] if s else []),
    ("GPU SM Clocks", "DCGM_FI_DEV_SM_CLOCK", _per_gpu(("Hostname", "UUID", "gpu"))),
    ("GPU Utilization", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", _per_gpu(("Hostname", "gpu"))),
    ("Tensor Core Utilization", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
     _per_gpu(("Hostname", "gpu"))),
    ("GPU Framebuffer Mem Used", "DCGM_FI_DEV_FB_USED", _per_gpu(("Hostname", "gpu"))),
)  # fmt: skip


def measure(tmp: Path) -> dict[str, object]:
    lib = build_fake_nvml(tmp / "nvml")
    state = tmp / "nvml_state"
    write_fake_nvml_state(state, STATE)
    env = fake_nvml_env(lib, gpus=H200, state=state, GPUYARD_TELEMETRY_S="0.2", GPUYARD_CPUS="8")
    server = ServerProcess(tmp / "state", env=env).start()
    try:
        server.cli("submit", "--gpus", "1", "--", "sleep", "120")
        for _ in range(2):
            server.cli("submit", "--gpu-mem", "60G", "--", "sleep", "120")
        token = (server.state_dir / "token").read_text().strip()

        def scrape() -> dict[str, Samples] | None:
            req = urllib.request.Request(
                f"{server.url}/metrics", headers={"Authorization": f"Bearer {token}"}
            )
            with urllib.request.urlopen(req, timeout=10) as resp:
                text = resp.read().decode()
            families = {
                f.name: [(s.labels, s.value) for s in f.samples]
                for f in text_string_to_metric_families(text)
            }
            running = families.get("gpuyard_jobs_running", [({}, 0.0)])[0][1]
            return families if running == 3 and families["DCGM_FI_DEV_POWER_USAGE"] else None

        first = wait_for(scrape, timeout_s=60)
        cost = first["gpuyard_telemetry_cpu_seconds"][0][1]
        families = wait_for(
            lambda: (f := scrape()) and f["gpuyard_telemetry_cpu_seconds"][0][1] > cost and f,
            timeout_s=30,
        )
        shown = {title: bool(query(_filtered(families, name))) for title, name, query in PANELS}
        power = _filtered(families, "DCGM_FI_DEV_POWER_USAGE")
        [power_total] = PANELS[3][2](power) or [0.0]
        [avg_temp] = PANELS[1][2](_filtered(families, "DCGM_FI_DEV_GPU_TEMP")) or [0.0]
        return {
            "bench": "grafana_12239",
            "panels": len(PANELS),
            "panels_with_data": sum(shown.values()),
            "empty": [t for t, ok in shown.items() if not ok],
            "power_total_w": power_total,
            "power_drawn_w": sum(DRAW_MW) / 1000,
            "power_plain_sum_w": sum(v for _, v in power),  # sum(DCGM_FI_DEV_POWER_USAGE)
            "avg_temp_c": round(avg_temp, 2),  # the "GPU Avg. Temp" panel
            "true_avg_temp_c": sum(TEMP_C) / len(TEMP_C),
            "series_per_family": len(families["DCGM_FI_DEV_POWER_USAGE"]),
            "gpus": len(H200),
        }
    finally:
        server.stop()
        server.kill_jobs()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        result = measure(Path(d))
    if args.json:
        print(json.dumps(with_machine(result)))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
