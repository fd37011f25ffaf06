"""The one wrapper around NVML (nvidia-ml-py). Every NVML call of the server goes through here.

Telemetry (`NvmlTelemetry`) turns every failing or missing NVML function into None ("n/a"):
drivers differ in what they offer (ECC on consumer boards, events in containers, versioned
symbols on old drivers), and none of that may stop the server.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from gpuyard.adapters.gpus.nvml_counters import NvmlCounters
from gpuyard.domain.job import Gpu
from gpuyard.services.ports import GpuProcessReading, GpuReading

log = logging.getLogger("gpuyard.gpus")
_MIB = 2**20
_XID_CRITICAL = 0x8  # nvmlEventTypeXidCriticalError
_MAX_EVENTS_PER_READ = 256
# nvmlClocksEventReason* bits, in NVML's order.
_THROTTLE_BITS = (
    (0x1, "gpu_idle"), (0x2, "applications_clocks"), (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"), (0x10, "sync_boost"), (0x20, "sw_thermal"), (0x40, "hw_thermal"),
    (0x80, "hw_power_brake"), (0x100, "display_clocks"),
)  # fmt: skip
# Calls made under a name of their own (so a driver lacking one still has the other).
_ALIASES: dict[str, Callable[..., Any]] = {
    "nvmlDeviceGetMemoryInfo_v2":
        lambda nv, handle: nv.nvmlDeviceGetMemoryInfo(handle, version=nv.nvmlMemory_v2),
}  # fmt: skip


class NvmlUnavailable(Exception):
    """No usable NVIDIA driver (or nvidia-ml-py missing); the message says which."""


def _init_nvml() -> Any:
    """pynvml, initialised (one reference; the caller shuts it down); NvmlUnavailable says
    why not."""
    try:
        import pynvml
    except ImportError:
        raise NvmlUnavailable("nvidia-ml-py is not installed") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(f"no NVIDIA driver found (NVML: {exc})") from None
    return pynvml


def detect_gpus() -> list[Gpu]:
    """GPUs the NVIDIA driver reports, in NVML index order (PCI bus order)."""
    pynvml = _init_nvml()
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
                    pci_bus_id=_pci_bus_id(pynvml, handle),
                    vendor="nvidia",
                    arch=_compute_capability(pynvml, handle),
                )
            )
        return gpus
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(f"NVML failed while listing GPUs: {exc}") from None
    finally:
        pynvml.nvmlShutdown()


def _compute_capability(pynvml: Any, handle: Any) -> str:
    """ "9.0" for an H100; "" where the driver cannot say."""
    try:
        major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
    except pynvml.NVMLError:
        return ""
    return f"{major}.{minor}"


def _pci_bus_id(pynvml: Any, handle: Any) -> str:
    """The GPU's PCI address as dcgm-exporter labels it (`pci_bus_id`); "" if NVML fails."""
    try:
        return _text(pynvml.nvmlDeviceGetPciInfo(handle).busId)
    except pynvml.NVMLError:
        return ""


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def throttle_names(mask: int) -> tuple[str, ...]:
    """The clocks event (throttle) reasons set in an NVML bitmask."""
    return tuple(name for bit, name in _THROTTLE_BITS if mask & bit)


class NvmlTelemetry:
    """GpuTelemetrySource over NVML: initialised once, used from the sampling thread only.

    A function the driver lacks (FunctionNotFound) is not called again; one a GPU does not
    support (NotSupported) is not called again for that GPU: both read as None.
    """

    def __init__(self) -> None:
        self._nv: Any = _init_nvml()
        self._handles: dict[int, Any] = {}
        self._absent: set[str] = set()  # functions this driver lacks
        self._unsupported: set[tuple[str, int]] = set()
        self._events: Any = self._call_global("nvmlEventSetCreate")
        self._xid_events: dict[int, int] = {}  # GPUs registered for XID events -> count
        self._last_xid: dict[int, int] = {}
        self._counters = NvmlCounters(self._nv)
        self._driver_version = self._read_driver_version()

    def _read_driver_version(self) -> str | None:
        """dcgm-exporter's `DCGM_FI_DRIVER_VERSION` label ("560.35.03"); None if NVML fails."""
        nv = self._nv
        try:
            return _text(nv.nvmlSystemGetDriverVersion())
        except nv.NVMLError:
            return None

    def read(self, indices: Sequence[int], *, processes: bool) -> list[GpuReading]:
        xids = self._drain_xid_events()
        readings = [self._read_one(index, processes) for index in indices]
        for index, code in xids:
            self._xid_events[index] = self._xid_events.get(index, 0) + 1
            self._last_xid[index] = code
        return readings

    def close(self) -> None:
        nv = self._nv
        self._counters.close()
        try:
            if self._events is not None:
                nv.nvmlEventSetFree(self._events)
        except nv.NVMLError:
            pass
        try:
            nv.nvmlShutdown()
        except nv.NVMLError:
            pass

    # -- one GPU --------------------------------------------------------------------------
    def _read_one(self, index: int, processes: bool) -> GpuReading:
        nv = self._nv
        try:
            handle = self._handle(index)
        except nv.NVMLError as exc:
            return GpuReading(index, error=str(exc))
        lost: list[str] = []

        def get(name: str, *args: object) -> Any:
            return self._call(name, index, handle, lost, *args)

        util = get("nvmlDeviceGetUtilizationRates")
        # v2 counts the driver's reservation apart from used (as dcgm-exporter's FB_* do)
        memory = get("nvmlDeviceGetMemoryInfo_v2")
        if memory is None:
            memory = get("nvmlDeviceGetMemoryInfo")
        power_mw = get("nvmlDeviceGetPowerUsage")
        limit_mw = get("nvmlDeviceGetEnforcedPowerLimit")
        throttle = self._first(get, "nvmlDeviceGetCurrentClocksEventReasons",
                               "nvmlDeviceGetCurrentClocksThrottleReasons")  # fmt: skip
        procs = None
        if processes:
            listed = self._first(get, "nvmlDeviceGetComputeRunningProcesses_v3",
                                 "nvmlDeviceGetComputeRunningProcesses_v2")  # fmt: skip
            procs = None if listed is None else tuple(_process(p) for p in listed)
        reading = GpuReading(
            index=index,
            util_pct=None if util is None else int(util.gpu),
            memory_util_pct=None if util is None else int(util.memory),
            memory_used_mib=None if memory is None else int(memory.used) // _MIB,
            memory_total_mib=None if memory is None else int(memory.total) // _MIB,
            temperature_c=_int(get("nvmlDeviceGetTemperature", nv.NVML_TEMPERATURE_GPU)),
            power_w=None if power_mw is None else power_mw / 1000,
            power_limit_w=None if limit_mw is None else limit_mw / 1000,
            sm_clock_mhz=_int(get("nvmlDeviceGetClockInfo", nv.NVML_CLOCK_SM)),
            throttle_reasons=None if throttle is None else throttle_names(int(throttle)),
            ecc_corrected=_int(get("nvmlDeviceGetTotalEccErrors",
                                   nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC)),
            ecc_uncorrected=_int(get("nvmlDeviceGetTotalEccErrors",
                                     nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC)),
            xid_events=self._xid_events.get(index),
            last_xid=self._last_xid.get(index),
            processes=procs,
            memory_reserved_mib=_reserved_mib(memory),
            driver_version=self._driver_version,
            **self._counters.read(index, handle, get),
        )  # fmt: skip
        if lost:
            self._handles.pop(index, None)  # get a fresh handle once it is back
            return GpuReading(index, error=lost[0])
        return reading

    def _handle(self, index: int) -> Any:
        handle = self._handles.get(index)
        if handle is None:
            handle = self._nv.nvmlDeviceGetHandleByIndex(index)
            self._handles[index] = handle
            if self._events is not None and index not in self._xid_events:
                registered = self._call_global(
                    "nvmlDeviceRegisterEvents", handle, _XID_CRITICAL, self._events
                )
                if registered is not _FAILED:
                    self._xid_events[index] = 0
        return handle

    def _call(self, name: str, index: int, handle: Any, lost: list[str], *args: object) -> Any:
        """`pynvml.<name>(handle, *args)`, or None where it is missing, unsupported or fails."""
        if lost or name in self._absent or (name, index) in self._unsupported:
            return None
        nv = self._nv
        try:
            alias = _ALIASES.get(name)
            if alias is not None:
                return alias(nv, handle, *args)
            return getattr(nv, name)(handle, *args)
        except nv.NVMLError_FunctionNotFound:
            log.info("NVML: %s is not offered by this driver; shown as n/a", name)
            self._absent.add(name)
        except nv.NVMLError_NotSupported:
            self._unsupported.add((name, index))
        except nv.NVMLError_GpuIsLost as exc:
            lost.append(str(exc))
        except nv.NVMLError:
            pass
        return None

    def _first(self, get: Callable[..., Any], *names: str) -> Any:
        """The first of several versions of one function that the driver offers."""
        for name in names:
            value = get(name)
            if value is not None or name not in self._absent:
                return value
        return None

    def _call_global(self, name: str, *args: object) -> Any:
        nv = self._nv
        try:
            return getattr(nv, name)(*args)
        except nv.NVMLError as exc:
            log.info("NVML: %s failed (%s): XID events shown as n/a", name, exc)
            return _FAILED if name != "nvmlEventSetCreate" else None

    def _drain_xid_events(self) -> list[tuple[int, int]]:
        """Critical XID events raised since the last read: (GPU index, XID code)."""
        if self._events is None or not self._xid_events:
            return []
        nv = self._nv
        found = []
        for _ in range(_MAX_EVENTS_PER_READ):
            try:
                data = nv.nvmlEventSetWait_v2(self._events, 0)
                found.append((int(nv.nvmlDeviceGetIndex(data.device)), int(data.eventData)))
            except nv.NVMLError:  # Timeout: nothing more pending (or events broke: n/a)
                break
        return found


_FAILED = object()


def _reserved_mib(memory: Any) -> int | None:
    """The driver's reserved framebuffer: NVML's v2 memory info has it, v1 (in `used`) not."""
    reserved = getattr(memory, "reserved", None)
    return None if reserved is None else int(reserved) // _MIB


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _process(info: Any) -> GpuProcessReading:
    used = info.usedGpuMemory  # None where the driver can't say (WDDM)
    return GpuProcessReading(int(info.pid), None if used is None else int(used) // _MIB)
