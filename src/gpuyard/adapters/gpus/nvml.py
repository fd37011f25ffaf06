"""The one wrapper around NVML (nvidia-ml-py). Every NVML call of the server goes through here."""

from __future__ import annotations

from gpuyard.domain.job import Gpu


class NvmlUnavailable(Exception):
    """No usable NVIDIA driver (or nvidia-ml-py missing); the message says which."""


def detect_gpus() -> list[Gpu]:
    """GPUs the NVIDIA driver reports, in NVML index order (PCI bus order)."""
    try:
        import pynvml
    except ImportError:
        raise NvmlUnavailable("nvidia-ml-py is not installed") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(f"no NVIDIA driver found (NVML: {exc})") from None
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            gpus.append(
                Gpu(
                    index=index,
                    uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
                    name=_text(pynvml.nvmlDeviceGetName(handle)),
                    memory_total_mib=int(pynvml.nvmlDeviceGetMemoryInfo(handle).total) // 2**20,
                    detected=True,
                )
            )
        return gpus
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(f"NVML failed while listing GPUs: {exc}") from None
    finally:
        pynvml.nvmlShutdown()


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
