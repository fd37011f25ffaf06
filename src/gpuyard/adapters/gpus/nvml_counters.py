"""The rest of dcgm-exporter's default counters from NVML (issue 24): memory clock and
temperature, encoder/decoder use, total energy, PCIe and NVLink
traffic, PCIe replays, remapped rows, and Hopper's GPM activity (tensor, graphics, DRAM);
the reserved framebuffer comes with `nvml.py`'s memory read (v2).

Part of the NVML wrapper (`nvml.py` calls it with its own guarded `get`, so a function the
driver lacks or the GPU does not support reads n/a and is not called again). One
`nvmlDeviceGetFieldValues` call per GPU reads the fields NVML offers only that way (memory
temperature, PCIe byte counters, NVLink throughput per link); the NVLink link count is read
once per GPU. GPM needs two samples: each read takes a new one and reports the activity since
the previous (none at the first read).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("gpuyard.gpus")

_KIB = 1024
# nvml.h's field ids
_FI_MEMORY_TEMP = 82
_FI_NVLINK_LINK_COUNT = 91
_FI_NVLINK_DATA_TX = 138
_FI_NVLINK_DATA_RX = 139
_FI_PCIE_TX_BYTES = 197
_FI_PCIE_RX_BYTES = 198
# nvmlValueType_t -> the union member holding the value
_VALUE_MEMBER = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")
# NVML_GPM_METRIC_*: (id, GpuReading field)
_GPM_METRICS = ((5, "tensor_active_pct"), (1, "gr_engine_active_pct"), (10, "dram_active_pct"))

Get = Callable[..., Any]


class NvmlCounters:
    """Reads the counters above for one GPU at a time; keeps what must persist between
    reads (NVLink link counts, the last GPM sample)."""

    def __init__(self, nv: Any) -> None:
        self._nv = nv
        self._links: dict[int, int] = {}  # GPU index -> NVLink links (0: none or n/a)
        self._gpm_last: dict[int, Any] = {}
        self._gpm_off: set[int] = set()

    def read(self, index: int, handle: Any, get: Get) -> dict[str, Any]:
        """GpuReading's fields for these counters (absent: n/a)."""
        nv = self._nv
        out: dict[str, Any] = {}
        out["mem_clock_mhz"] = _int(get("nvmlDeviceGetClockInfo", nv.NVML_CLOCK_MEM))
        out["enc_util_pct"] = _first_int(get("nvmlDeviceGetEncoderUtilization"))
        out["dec_util_pct"] = _first_int(get("nvmlDeviceGetDecoderUtilization"))
        out["energy_mj"] = _int(get("nvmlDeviceGetTotalEnergyConsumption"))
        out["pcie_replays"] = _int(get("nvmlDeviceGetPcieReplayCounter"))
        rows = get("nvmlDeviceGetRemappedRows")
        if rows is not None:
            correctable, uncorrectable, _pending, failed = rows
            out["remapped_rows_correctable"] = int(correctable)
            out["remapped_rows_uncorrectable"] = int(uncorrectable)
            out["row_remap_failed"] = bool(failed)
        out.update(self._fields(index, get))
        out.update(self._gpm(index, handle, get))
        return {k: v for k, v in out.items() if v is not None}

    def close(self) -> None:
        for sample in self._gpm_last.values():
            self._free(sample)
        self._gpm_last.clear()

    # -- field values ----------------------------------------------------------------------
    def _fields(self, index: int, get: Get) -> dict[str, Any]:
        if index not in self._links:
            answer = get("nvmlDeviceGetFieldValues", [_FI_NVLINK_LINK_COUNT])
            count = None if answer is None else _value(answer[0])
            self._links[index] = int(count or 0)
        links = self._links[index]
        ids: list[int | tuple[int, int]] = [_FI_MEMORY_TEMP, _FI_PCIE_TX_BYTES, _FI_PCIE_RX_BYTES]
        ids += [(f, n) for n in range(links) for f in (_FI_NVLINK_DATA_TX, _FI_NVLINK_DATA_RX)]
        answer = get("nvmlDeviceGetFieldValues", ids)
        if answer is None:
            return {}
        values = [_value(v) for v in answer]
        temp, tx, rx = values[:3]
        nvlink = values[3:]
        return {
            "memory_temp_c": _int(temp),
            "pcie_tx_kib": None if tx is None else int(tx) // _KIB,
            "pcie_rx_kib": None if rx is None else int(rx) // _KIB,
            "nvlink_kib": _total(nvlink),
        }

    # -- GPM ---------------------------------------------------------------------------------
    def _gpm(self, index: int, handle: Any, get: Get) -> dict[str, Any]:
        if index in self._gpm_off:
            return {}
        nv = self._nv
        if index not in self._gpm_last:
            support = get("nvmlGpmQueryDeviceSupport")
            if support is None or not support.isSupportedDevice:
                self._gpm_off.add(index)
                return {}
        try:
            sample = nv.nvmlGpmSampleAlloc()
        except nv.NVMLError as exc:
            log.info("NVML: GPM samples unavailable (%s): tensor activity shown as n/a", exc)
            self._gpm_off.add(index)
            return {}
        if get("nvmlGpmSampleGet", sample) is None:
            self._free(sample)
            return {}
        last, self._gpm_last[index] = self._gpm_last.get(index), sample
        if last is None:
            return {}
        try:
            return self._gpm_metrics(last, sample)
        finally:
            self._free(last)

    def _gpm_metrics(self, first: Any, second: Any) -> dict[str, Any]:
        nv = self._nv
        request = nv.c_nvmlGpmMetricsGet_t()
        request.version = nv.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(_GPM_METRICS)
        request.sample1, request.sample2 = first, second
        for i, (metric_id, _) in enumerate(_GPM_METRICS):
            request.metrics[i].metricId = metric_id
        try:
            nv.nvmlGpmMetricsGet(request)
        except nv.NVMLError:
            return {}
        return {
            field: float(request.metrics[i].value)
            for i, (_, field) in enumerate(_GPM_METRICS)
            if request.metrics[i].nvmlReturn == 0
        }

    def _free(self, sample: Any) -> None:
        try:
            self._nv.nvmlGpmSampleFree(sample)
        except self._nv.NVMLError:
            pass


def _value(field: Any) -> float | int | None:
    """One nvmlFieldValue_t's value; None where that field failed."""
    if field.nvmlReturn != 0 or not 0 <= field.valueType < len(_VALUE_MEMBER):
        return None
    value: float | int = getattr(field.value, _VALUE_MEMBER[field.valueType])
    return value


def _total(values: list[float | int | None]) -> int | None:
    """The links' sum; None without links or where one failed."""
    known = [v for v in values if v is not None]
    return int(sum(known)) if values and len(known) == len(values) else None


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _first_int(pair: Any) -> int | None:
    """nvmlDevice*Utilization's [util, sampling period]: the util."""
    return None if pair is None else int(pair[0])
