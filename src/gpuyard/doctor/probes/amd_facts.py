"""The doctor's one-shot amdsmi reading (AMD GPUs): the amdgpu driver's version, the ROCm
runtime's (librocm-core, through `amdsmi_get_rocm_version`), and each GPU's name and gfx target.
Through AMD's own binding only (never `rocm-smi`'s output); a function that fails reads as None
(n/a), never an exception.
"""

from __future__ import annotations

import contextlib
import io
from typing import Any

from gpuyard.doctor.model import AmdGpuFacts, RocmFacts

# amdsmi statuses that mean no AMD GPU driver here (not a failure).
_ABSENT_STATUSES = frozenset({34, 51, 52})  # DRIVER_NOT_LOADED, NO_DRV, FILE_NOT_FOUND


def read_rocm_facts() -> RocmFacts:
    """What amdsmi says about the driver, the ROCm runtime and the AMD GPUs; why not, if it
    cannot be asked."""
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):  # the binding prints when the library is gone
            import amdsmi
    except ImportError:
        return RocmFacts(absent="the amdsmi package is not installed (pip install 'gpuyard[amd]')")
    except Exception:
        return RocmFacts(absent="no libamd_smi.so (ROCm's amd-smi-lib)")
    try:
        amdsmi.amdsmi_init(amdsmi.AmdSmiInitFlags.INIT_AMD_GPUS)
    except amdsmi.AmdSmiException as exc:
        code = getattr(exc, "err_code", None)
        if code in _ABSENT_STATUSES:
            return RocmFacts(absent=f"no AMD GPU driver loaded (amdsmi: {_why(exc)})")
        return RocmFacts(error=_why(exc))
    try:
        return _read(amdsmi)
    finally:
        with contextlib.suppress(Exception):
            amdsmi.amdsmi_shut_down()


def _read(smi: Any) -> RocmFacts:
    try:
        handles = list(smi.amdsmi_get_processor_handles())
    except smi.AmdSmiException as exc:
        return RocmFacts(error=f"cannot list the GPUs: {_why(exc)}")
    if not handles:
        return RocmFacts(absent="amdsmi finds no AMD GPU")
    gpus, driver = [], None
    for index, handle in enumerate(handles):
        asic = _call(smi, "amdsmi_get_gpu_asic_info", handle) or {}
        board = _call(smi, "amdsmi_get_gpu_board_info", handle) or {}
        name = _known(asic.get("market_name")) or _known(board.get("product_name")) or "n/a"
        gfx = _known(asic.get("target_graphics_version"))
        gpus.append(AmdGpuFacts(index, name, gfx.lower() if gfx and gfx != "gfx0" else None))
        if driver is None:
            info = _call(smi, "amdsmi_get_gpu_driver_info", handle) or {}
            driver = _known(info.get("driver_version"))
    rocm, rocm_error = None, None
    try:
        ok, text = smi.amdsmi_get_rocm_version()
        rocm, rocm_error = (str(text), None) if ok else (None, " ".join(str(text).split()))
    except Exception as exc:
        rocm_error = _why(exc)
    return RocmFacts(driver_version=driver, rocm_version=rocm, rocm_error=rocm_error,
                     gpus=tuple(gpus))  # fmt: skip


def _call(smi: Any, name: str, *args: object) -> Any:
    fn = getattr(smi, name, None)
    if fn is None:
        return None
    try:
        return fn(*args)
    except Exception:
        return None


def _known(value: object) -> str | None:
    text = str(value).strip() if value is not None else ""
    return text if text and text.upper() != "N/A" else None


def _why(exc: BaseException) -> str:
    info = getattr(exc, "err_info", None)
    return str(info).split(" - ")[0] if info else " ".join(str(exc).split())
