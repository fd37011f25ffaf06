"""The doctor's one-shot NVML reading: driver, CUDA version, GPUs' compute capability and
persistence mode. Each missing or failing function reads as None (n/a), never an exception.
"""

from __future__ import annotations

from typing import Any

from gpuyard.doctor.compat import cuda_from_nvml
from gpuyard.doctor.model import DriverFacts, GpuFacts


def read_driver_facts() -> DriverFacts:
    """What the NVIDIA driver says about itself and its GPUs; why not, if there is none."""
    try:
        import pynvml
    except ImportError:
        return DriverFacts(absent="nvidia-ml-py is not installed, NVML cannot be asked")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        return DriverFacts(absent="no libnvidia-ml.so.1")
    except pynvml.NVMLError_DriverNotLoaded as exc:
        return DriverFacts(not_loaded=True, error=str(exc))
    except pynvml.NVMLError as exc:
        return DriverFacts(error=str(exc))
    try:
        return _read(pynvml)
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def _read(nv: Any) -> DriverFacts:
    driver = _call(nv, "nvmlSystemGetDriverVersion")
    cuda = _call(nv, "nvmlSystemGetCudaDriverVersion_v2")
    if cuda is None:
        cuda = _call(nv, "nvmlSystemGetCudaDriverVersion")
    try:
        count = int(nv.nvmlDeviceGetCount())
    except nv.NVMLError as exc:
        return DriverFacts(error=f"cannot count the GPUs: {exc}")
    gpus = []
    for index in range(count):
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(index)
        except nv.NVMLError as exc:
            return DriverFacts(error=f"GPU {index}: {exc}")
        name = _call(nv, "nvmlDeviceGetName", handle)
        cc = _call(nv, "nvmlDeviceGetCudaComputeCapability", handle)
        persistence = _call(nv, "nvmlDeviceGetPersistenceMode", handle)
        gpus.append(GpuFacts(
            index=index,
            name=_text(name) if name is not None else "n/a",
            compute_capability=(int(cc[0]), int(cc[1])) if cc is not None else None,
            persistence_mode=None if persistence is None
            else persistence == nv.NVML_FEATURE_ENABLED,
        ))  # fmt: skip
    return DriverFacts(
        driver_version=_text(driver) if driver is not None else None,
        cuda_version=cuda_from_nvml(int(cuda)) if cuda else None,
        gpus=tuple(gpus),
    )


def _call(nv: Any, name: str, *args: object) -> Any:
    """`pynvml.<name>(*args)`, or None where the driver lacks it, does not support it, or
    fails; pynvml itself may lack an old or new function."""
    fn = getattr(nv, name, None)
    if fn is None:
        return None
    try:
        return fn(*args)
    except nv.NVMLError:
        return None


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
