"""The one wrapper around amdsmi (AMD's Python binding of libamd_smi, ROCm's amd-smi-lib).
Every AMD GPU call of the server goes through here; `rocm-smi` output is never parsed.

Detection lists AMD GPUs in amdsmi's order (one processor handle per GPU, or per partition
of a GPU split into several: CPX), with the gfx target frameworks build for ("gfx942"), the
board serial and the partition modes. Telemetry (`AmdSmiTelemetry`), as NVML's, turns every
failing or missing function into None ("n/a"); a GPU whose memory can no longer be read
(the driver answers an I/O or not-found error) is reported lost, so the health guard drains
it. RAS: amdsmi's total uncorrectable ECC count is the one NVML's volatile double-bit count
plays; AMD GPUs have no XID events (those stay n/a).
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpuyard.domain.job import Gpu
from gpuyard.services.ports import GpuProcessReading, GpuReading

log = logging.getLogger("gpuyard.gpus")
_MIB = 2**20
# amdsmi_status_t values (amdsmi.h) that mean the GPU itself is gone, not one function: an
# I/O or DRM error, no such device, the driver not loaded or restarting.
_LOST = {6: "DRM error", 12: "I/O error", 31: "not found", 34: "driver not loaded",
         51: "no driver", 54: "amdgpu restart error"}  # fmt: skip
_NOT_SUPPORTED = (2, 3)  # AMDSMI_STATUS_NOT_SUPPORTED, AMDSMI_STATUS_NOT_YET_IMPLEMENTED
# amdsmi_get_violation_status's "active_*" flags: why the clocks are held back now.
_VIOLATIONS = (
    ("active_prochot_thrm", "processor_hot"), ("active_ppt_pwr", "package_power"),
    ("active_socket_thrm", "socket_thermal"), ("active_vr_thrm", "vr_thermal"),
    ("active_hbm_thrm", "hbm_thermal"),
)  # fmt: skip
THROTTLE_NAMES = tuple(name for _, name in _VIOLATIONS)

_loaded: Any = None
_load_error: str | None = None


class AmdSmiUnavailable(Exception):
    """No usable AMD GPU driver (or the amdsmi package missing); the message says which."""


def _import() -> Any:
    """The amdsmi module, imported once. Its import loads libamd_smi.so and prints to stdout
    when it cannot: that text goes to the log instead."""
    global _loaded, _load_error
    if _loaded is not None:
        return _loaded
    if _load_error is not None:
        raise AmdSmiUnavailable(_load_error)
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            import amdsmi
    except ImportError:
        _load_error = "the amdsmi package is not installed (pip install 'gpuyard[amd]')"
    except Exception as exc:  # the binding's import fails (KeyError) without libamd_smi.so
        log.debug("amdsmi: %s (%r)", " ".join(printed.getvalue().split()), exc)
        _load_error = "no AMD GPU library found (libamd_smi.so, ROCm's amd-smi-lib)"
    else:
        _loaded = amdsmi
        return amdsmi
    raise AmdSmiUnavailable(_load_error)


def _init_amdsmi() -> Any:
    """amdsmi, initialised for AMD GPUs (one reference; the caller shuts it down)."""
    amdsmi = _import()
    try:
        amdsmi.amdsmi_init(amdsmi.AmdSmiInitFlags.INIT_AMD_GPUS)
    except amdsmi.AmdSmiException as exc:
        raise AmdSmiUnavailable(f"no AMD GPU driver found (amdsmi: {_why(exc)})") from None
    return amdsmi


def _why(exc: BaseException) -> str:
    info = getattr(exc, "err_info", None)
    return str(info).split(" - ")[0] if info else " ".join(str(exc).split())


def _status(exc: BaseException) -> int | None:
    code = getattr(exc, "err_code", None)
    return code if isinstance(code, int) else None


def detect_amd_gpus(first_index: int = 0) -> list[Gpu]:
    """AMD GPUs in amdsmi's order, numbered from `first_index` (after the NVIDIA GPUs)."""
    amdsmi = _init_amdsmi()
    try:
        handles = amdsmi.amdsmi_get_processor_handles()
        return [_describe(amdsmi, handle, first_index + i, i) for i, handle in enumerate(handles)]
    except amdsmi.AmdSmiException as exc:
        raise AmdSmiUnavailable(f"amdsmi failed while listing GPUs: {_why(exc)}") from None
    finally:
        with contextlib.suppress(Exception):
            amdsmi.amdsmi_shut_down()


def _describe(amdsmi: Any, handle: Any, index: int, position: int) -> Gpu:
    """One GPU. Its `device_index` (what ROCR_VISIBLE_DEVICES names) is the ROCm runtime's
    own index (amdsmi's `hip_id`, KFD's order), else its place in amdsmi's list."""
    asic = amdsmi.amdsmi_get_gpu_asic_info(handle)

    def optional(fn: Callable[..., Any], *args: object) -> Any:
        try:
            return fn(handle, *args)
        except amdsmi.AmdSmiException:
            return None

    board = optional(amdsmi.amdsmi_get_gpu_board_info) or {}
    kfd = optional(amdsmi.amdsmi_get_gpu_kfd_info) or {}
    total = optional(amdsmi.amdsmi_get_gpu_memory_total, amdsmi.AmdSmiMemoryType.VRAM)
    serial = _known(board.get("product_serial")) or _known(asic.get("asic_serial")) or ""
    name = _known(asic.get("market_name")) or _known(board.get("product_name")) or "AMD GPU"
    partition_id = kfd.get("current_partition_id")
    hip_id = (optional(amdsmi.amdsmi_get_gpu_enumeration_info) or {}).get("hip_id")
    return Gpu(
        index=index,
        uuid=str(amdsmi.amdsmi_get_gpu_device_uuid(handle)),
        name=name,
        memory_total_mib=None if total is None else int(total) // _MIB,
        detected=True,
        pci_bus_id=str(optional(amdsmi.amdsmi_get_gpu_device_bdf) or ""),
        vendor="amd",
        arch=_known(asic.get("target_graphics_version")) or "",
        serial=serial,
        compute_partition=_known(optional(amdsmi.amdsmi_get_gpu_compute_partition)) or "",
        memory_partition=_known(optional(amdsmi.amdsmi_get_gpu_memory_partition)) or "",
        partition_id=partition_id if isinstance(partition_id, int) else 0,
        device_index=hip_id if isinstance(hip_id, int) else position,
    )


def _known(value: object) -> str | None:
    """A string amdsmi reported, or None for its "N/A" (and empty) answers."""
    if not isinstance(value, str):
        return None
    value = value.strip()
    return None if value in ("", "N/A") else value


def _number(value: object) -> int | None:
    """amdsmi's numbers come back as "N/A" when unsupported (0xFFFF and such)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def throttle_names(status: Mapping[str, object]) -> tuple[str, ...]:
    """The active throttle (violation) reasons in amdsmi_get_violation_status's answer."""
    return tuple(name for key, name in _VIOLATIONS if status.get(key) is True)


class AmdSmiTelemetry:
    """GpuTelemetrySource over amdsmi for the AMD GPUs of the inventory, by UUID: `uuids`
    maps the server's GPU index to the UUID detection found. Initialised once, used from the
    sampling thread only. A function a GPU does not support is not called again for it."""

    def __init__(self, uuids: Mapping[int, str]) -> None:
        self._amd: Any = _init_amdsmi()
        amd = self._amd
        self._absent: set[str] = set()  # functions this binding lacks
        self._unsupported: set[tuple[str, int]] = set()
        self._handles: dict[int, Any] = {}
        self._missing: dict[int, str] = {}
        self._own: dict[str, Callable[..., Any]] = {
            "amdsmi_get_violation_status": self._violation_flags,
        }
        # Handles by UUID, in amdsmi's order: should partitions of one board share a UUID,
        # the server's GPUs with it take them in the same order as detection numbered them.
        found: dict[str, list[Any]] = {}
        for handle in amd.amdsmi_get_processor_handles():
            with contextlib.suppress(amd.AmdSmiException):
                found.setdefault(str(amd.amdsmi_get_gpu_device_uuid(handle)), []).append(handle)
        for index, uuid in sorted(uuids.items()):
            if found.get(uuid):
                self._handles[index] = found[uuid].pop(0)
            else:
                self._missing[index] = f"amdsmi no longer lists the GPU with UUID {uuid}"

    def read(self, indices: Sequence[int], *, processes: bool) -> list[GpuReading]:
        return [self._read_one(index, processes) for index in indices]

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._amd.amdsmi_shut_down()

    def _read_one(self, index: int, processes: bool) -> GpuReading:
        handle = self._handles.get(index)
        if handle is None:
            return GpuReading(index, error=self._missing.get(index, "not an AMD GPU"))
        amd = self._amd
        lost: list[str] = []
        vram = amd.AmdSmiMemoryType.VRAM
        used = self._call("amdsmi_get_gpu_memory_usage", index, handle, lost, vram)
        if lost:  # the one read every amdgpu offers: its failure means the GPU is gone
            return GpuReading(index, error=lost[0])

        def get(name: str, *args: object) -> Any:
            return self._call(name, index, handle, None, *args)

        total = get("amdsmi_get_gpu_memory_total", vram)
        activity = get("amdsmi_get_gpu_activity") or {}
        power = get("amdsmi_get_power_info") or {}
        clock = get("amdsmi_get_clock_info", amd.AmdSmiClkType.GFX) or {}
        ecc = get("amdsmi_get_gpu_total_ecc_count") or {}
        violations = get("amdsmi_get_violation_status")
        watts = _number(power.get("current_socket_power"))
        if watts is None:
            watts = _number(power.get("average_socket_power"))  # MI200s report the average
        limit = _number(power.get("power_limit"))
        procs = None
        if processes:
            listed = get("amdsmi_get_gpu_process_list")
            procs = None if listed is None else tuple(_process(p) for p in listed)
        return GpuReading(
            index=index,
            util_pct=_number(activity.get("gfx_activity")),
            memory_util_pct=_number(activity.get("umc_activity")),
            memory_used_mib=None if used is None else int(used) // _MIB,
            memory_total_mib=None if total is None else int(total) // _MIB,
            temperature_c=self._temperature(get),
            power_w=None if watts is None else float(watts),
            power_limit_w=None if not limit else float(limit),
            sm_clock_mhz=_number(clock.get("clk")),
            throttle_reasons=None if violations is None else throttle_names(violations),
            ecc_corrected=_number(ecc.get("correctable_count")),
            ecc_uncorrected=_number(ecc.get("uncorrectable_count")),
            processes=procs,
        )

    def _temperature(self, get: Callable[..., Any]) -> int | None:
        """The junction (hotspot) temperature, as AMD's exporter shows; the edge one where a
        board has no junction sensor."""
        kinds, current = self._amd.AmdSmiTemperatureType, self._amd.AmdSmiTemperatureMetric.CURRENT
        for kind in (kinds.HOTSPOT, kinds.EDGE):
            value = get("amdsmi_get_temp_metric", kind, current)
            if isinstance(value, int) and value > 0:
                return value
        return None

    def _call(
        self, name: str, index: int, handle: Any, lost: list[str] | None, *args: object
    ) -> Any:
        """`amdsmi.<name>(handle, *args)`, or None where it is missing, unsupported or fails;
        with `lost` given, a status that means the GPU is gone is appended there."""
        key = (name, index) if not args else (f"{name}{args}", index)
        if name in self._absent or key in self._unsupported:
            return None
        amd = self._amd
        fn = self._own.get(name) or getattr(amd, name, None)
        if fn is None:
            log.info("amdsmi: this binding has no %s; shown as n/a", name)
            self._absent.add(name)
            return None
        try:
            return fn(handle, *args)
        except amd.AmdSmiException as exc:
            status = _status(exc)
            if status in _NOT_SUPPORTED:
                self._unsupported.add(key)
            elif lost is not None and status in _LOST:
                lost.append(f"amdsmi: {_LOST[status]} ({_why(exc)})")
        except Exception:  # the binding's own conversion of an odd answer: n/a this time
            log.debug("amdsmi: %s failed on GPU %d", name, index, exc_info=True)
        return None

    def _violation_flags(self, handle: Any) -> dict[str, bool]:
        """amdsmi_get_violation_status's "active_*" flags only, read from the binding's own
        struct: its Python function converts the per-XCP arrays too, ~0.45 ms a GPU, where
        this takes microseconds."""
        amd = self._amd
        wrapper = amd.amdsmi_wrapper
        status = wrapper.amdsmi_violation_status_t()
        code = wrapper.amdsmi_get_violation_status(handle, ctypes.byref(status))
        if code != 0:
            raise amd.AmdSmiLibraryException(code)
        return {key: getattr(status, key) == 1 for key, _ in _VIOLATIONS}


def _process(info: Mapping[str, Any]) -> GpuProcessReading:
    usage = info.get("memory_usage") or {}
    vram = usage.get("vram_mem") if isinstance(usage, Mapping) else None
    return GpuProcessReading(int(info["pid"]), int(vram) // _MIB if isinstance(vram, int) else None)
