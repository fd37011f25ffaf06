"""dcgm-exporter's families as `/metrics` renders them: its default counters
(`etc/default-counters.csv`, the DCGM_FI_PROF_* activity fields it adds where DCGM profiling
runs) with its names, units and help, each from one NVML reading.

Every family is a gauge, counters included (energy, PCIe, NVLink, remapped rows): the
Prometheus client library would rename a counter `..._total`, and dashboards query
dcgm-exporter's names; `rate()` and `increase()` work on them alike. A value NVML cannot
give is left out for that GPU, as dcgm-exporter does. What stays absent, and why, is listed in
docs/cli.md (Prometheus).

XID errors carry dcgm-exporter's `err_code` (the XID) and `err_msg` (its name in NVIDIA's
catalogue) labels: 0 and "No Error" until an XID happens.
"""

from __future__ import annotations

from collections.abc import Callable

from gpuyard.services.ports import GpuReading

Value = Callable[[GpuReading], float | None]


def _fb_free(r: GpuReading) -> int | None:
    if r.memory_used_mib is None or r.memory_total_mib is None:
        return None
    return r.memory_total_mib - r.memory_used_mib - (r.memory_reserved_mib or 0)


def _ratio(pct: float | None) -> float | None:
    """DCGM_FI_PROF_* are ratios (0-1); NVML's GPM gives percent."""
    return None if pct is None else pct / 100.0


def _flag(value: bool | None) -> int | None:
    return None if value is None else int(value)


# (dcgm-exporter name, its help, value from one reading), in default-counters.csv's order
DCGM_FAMILIES: tuple[tuple[str, str, Value], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", lambda r: r.sm_clock_mhz),
    ("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", lambda r: r.mem_clock_mhz),
    ("DCGM_FI_DEV_MEMORY_TEMP", "Memory temperature (in C).", lambda r: r.memory_temp_c),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", lambda r: r.temperature_c),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", lambda r: r.power_w),
    ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "Power management limit (in W).", lambda r: r.power_limit_w),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "Total energy consumption since boot (in mJ).",
     lambda r: r.energy_mj),
    ("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "Total number of bytes transmitted through PCIe TX "
     "(in KB) via NVML.", lambda r: r.pcie_tx_kib),
    ("DCGM_FI_DEV_PCIE_RX_THROUGHPUT", "Total number of bytes received through PCIe RX "
     "(in KB) via NVML.", lambda r: r.pcie_rx_kib),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "Total number of PCIe retries.",
     lambda r: r.pcie_replays),
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", lambda r: r.util_pct),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", lambda r: r.memory_util_pct),
    ("DCGM_FI_DEV_ENC_UTIL", "Encoder utilization (in %).", lambda r: r.enc_util_pct),
    ("DCGM_FI_DEV_DEC_UTIL", "Decoder utilization (in %).", lambda r: r.dec_util_pct),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", _fb_free),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", lambda r: r.memory_used_mib),
    ("DCGM_FI_DEV_FB_RESERVED", "Framebuffer memory reserved (in MiB).",
     lambda r: r.memory_reserved_mib),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "Total number of single-bit volatile ECC errors.",
     lambda r: r.ecc_corrected),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Total number of double-bit volatile ECC errors.",
     lambda r: r.ecc_uncorrected),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "Total number of NVLink bandwidth counters for all "
     "lanes (in KiB, data sent and received).", lambda r: r.nvlink_kib),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for uncorrectable "
     "errors", lambda r: r.remapped_rows_uncorrectable),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for correctable errors",
     lambda r: r.remapped_rows_correctable),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "Whether remapping of rows has failed",
     lambda r: _flag(r.row_remap_failed)),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active.",
     lambda r: _ratio(r.gr_engine_active_pct)),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Ratio of cycles any tensor pipe is active.",
     lambda r: _ratio(r.tensor_active_pct)),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "Ratio of cycles the device memory interface is active "
     "sending or receiving data.", lambda r: _ratio(r.dram_active_pct)),
)  # fmt: skip

XID_FAMILY = ("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.")

# NVIDIA's XID catalogue, the codes a training cluster meets (others: "Unknown Error")
XID_NAMES = {
    0: "No Error",
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    32: "Invalid or corrupted push buffer stream",
    38: "Driver firmware error",
    43: "GPU stopped processing",
    45: "Preemptive cleanup, due to previous errors",
    48: "Double Bit ECC Error",
    61: "Internal micro-controller breakpoint/warning",
    62: "Internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    68: "NVDEC0 Exception",
    69: "Graphics Engine class error",
    74: "NVLINK Error",
    79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    109: "Context Switch Timeout Error",
    119: "GSP RPC Timeout",
    120: "GSP Error",
    121: "C2C Link Error",
    140: "Unrecovered ECC Error",
}


def xid_labels(r: GpuReading) -> tuple[int, str, str] | None:
    """(value, err_code, err_msg) of the last XID; None where XID events are n/a."""
    if r.xid_events is None:
        return None
    code = r.last_xid or 0
    return code, str(code), XID_NAMES.get(code, "Unknown Error")
