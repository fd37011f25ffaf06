"""The doctor's facts as JSON and back: how a machine's agent hands its facts to the server and
the server to `gpuyard doctor --node` (which judges them, `checks.py`, as it judges its own).

Reading is lenient both ways: a field the reader does not know is ignored and a missing one
takes its default, so a CLI and an agent of different versions still understand each other.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any

from gpuyard.doctor.model import (
    AmdGpuFacts,
    Check,
    DiskFacts,
    DriverFacts,
    Facts,
    FrameworkBuild,
    GpuFacts,
    PythonFacts,
    RocmFacts,
    ServerFacts,
    Status,
)  # fmt: skip


def facts_to_json(facts: Facts) -> dict[str, Any]:
    """Plain data (dicts, lists, strings, numbers), as `json.dumps` writes it."""
    return asdict(facts)


def facts_from_json(data: dict[str, Any]) -> Facts:
    driver = dict(_known(DriverFacts, data.get("driver") or {}))
    driver["cuda_version"] = _pair(driver.get("cuda_version"))
    driver["gpus"] = tuple(_gpu(g) for g in driver.get("gpus") or ())
    out = Facts(
        driver=DriverFacts(**driver),
        python=_python(data["python"]) if data.get("python") else None,
        disk=DiskFacts(**_known(DiskFacts, data["disk"])) if data.get("disk") else None,
        server=ServerFacts(**_known(ServerFacts, data["server"])) if data.get("server") else None,
        gpus_requested=data.get("gpus_requested"),
        notes=tuple(
            Check(**{**_known(Check, c), "status": Status(c.get("status", "info"))})
            for c in data.get("notes") or ()
        ),
        rocm=_rocm(data["rocm"]) if data.get("rocm") else None,
        confinement=data.get("confinement"),
    )
    return out


def _gpu(data: dict[str, Any]) -> GpuFacts:
    capability = _pair(data.get("compute_capability"))
    return GpuFacts(**{**_known(GpuFacts, data), "compute_capability": capability})


def _python(data: dict[str, Any]) -> PythonFacts:
    builds = []
    for raw in data.get("frameworks") or ():
        build = _known(FrameworkBuild, raw)
        archs = build.get("archs")
        build["archs"] = tuple(archs) if archs is not None else None
        builds.append(FrameworkBuild(**build))
    return PythonFacts(**{**_known(PythonFacts, data), "frameworks": tuple(builds)})


def _rocm(data: dict[str, Any]) -> RocmFacts:
    gpus = tuple(AmdGpuFacts(**_known(AmdGpuFacts, g)) for g in data.get("gpus") or ())
    return RocmFacts(**{**_known(RocmFacts, data), "gpus": gpus})


def _known(cls: Any, data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def _pair(value: Any) -> tuple[int, int] | None:
    return (int(value[0]), int(value[1])) if value else None
