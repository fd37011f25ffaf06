"""Turn `--gpus auto|N|LIST` into the server's GPU list, detected (NVIDIA GPUs through NVML,
then AMD ones through amdsmi, numbered on) or declared."""

from __future__ import annotations

import logging
from collections.abc import Callable

from gpuyard.adapters.gpus.amd import AmdSmiUnavailable, detect_amd_gpus
from gpuyard.adapters.gpus.nvml import NvmlUnavailable, detect_gpus
from gpuyard.domain.errors import InvalidRequest
from gpuyard.domain.job import Gpu

log = logging.getLogger("gpuyard.gpus")


class NoGpuDriver(Exception):
    """Neither NVIDIA's nor AMD's library could be used; the message says why for each."""


def detect_all_gpus() -> list[Gpu]:
    """NVIDIA GPUs in NVML's order, then AMD GPUs in amdsmi's, indices continuing: a machine
    with both has both. NoGpuDriver when neither library answers."""
    found: list[Gpu] = []
    why = []
    try:
        found += detect_gpus()
    except NvmlUnavailable as exc:
        why.append(str(exc))
    try:
        found += detect_amd_gpus(first_index=len(found))
    except AmdSmiUnavailable as exc:
        why.append(str(exc))
    if len(why) == 2:
        raise NoGpuDriver("; ".join(why))
    return found


def _detected_by(gpus: list[Gpu]) -> str:
    """Where the GPUs came from: NVML, amdsmi, or both (with counts)."""
    amd = sum(1 for gpu in gpus if gpu.vendor == "amd")
    if amd == 0:
        return "detected by NVML"
    if amd == len(gpus):
        return "detected by amdsmi"
    return f"detected ({len(gpus) - amd} by NVML, {amd} by amdsmi)"


def choose_gpus(
    spec: str,
    *,
    detect: Callable[[], list[Gpu]] = detect_all_gpus,
    declared_mem_mib: int | None = None,
) -> tuple[list[Gpu], str]:
    """GPUs for `--gpus SPEC` and a one-line description of where they came from."""
    spec = spec.strip().lower()
    try:
        found: list[Gpu] | None = detect()
        why = ""
    except (NvmlUnavailable, AmdSmiUnavailable, NoGpuDriver) as exc:
        found, why = None, str(exc)
    if spec == "auto":
        if found is None:
            return [], f"0 GPUs: {why}; CPU-only jobs still run (declare GPUs with --gpus N)"
        return found, f"{len(found)} GPUs {_detected_by(found)}"
    if spec.isdigit():
        count = int(spec)
        if found is None:
            return _declare(count, declared_mem_mib), (
                f"{count} GPUs declared (--gpus {count}; {why})"
            )
        if count > len(found):
            raise InvalidRequest(
                f"--gpus {count}: only {len(found)} GPUs detected; use --gpus auto or fewer",
                field="gpus",
            )
        return found[:count], f"{count} of {len(found)} detected GPUs"
    try:
        wanted = [int(part) for part in spec.split(",") if part.strip()]
    except ValueError:
        raise InvalidRequest(
            f"--gpus {spec!r}: use auto, a count (4) or a list of indices (0,2)", field="gpus"
        ) from None
    if not wanted or len(set(wanted)) != len(wanted):
        raise InvalidRequest(f"--gpus {spec!r}: list each GPU index once, e.g. 0,2", field="gpus")
    if found is None:
        raise InvalidRequest(
            f"--gpus {spec}: a list needs detected GPUs, but {why}; use --gpus N to declare N",
            field="gpus",
        )
    by_index = {gpu.index: gpu for gpu in found}
    missing = [i for i in wanted if i not in by_index]
    if missing:
        raise InvalidRequest(
            f"--gpus {spec}: no GPU with index {missing[0]} (detected: "
            f"{', '.join(map(str, by_index)) or 'none'})",
            field="gpus",
        )
    return [by_index[i] for i in wanted], f"GPUs {spec} of {len(found)} detected"


def _declare(count: int, mem_mib: int | None) -> list[Gpu]:
    return [
        Gpu(
            index=i,
            uuid=f"declared-{i}",
            name="declared GPU",
            memory_total_mib=mem_mib,
            detected=False,
        )
        for i in range(count)
    ]
