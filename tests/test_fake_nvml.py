"""The fake libnvidia-ml.so.1 drives the real pynvml without a GPU.

Every check runs pynvml in a subprocess: the dynamic loader reads
LD_LIBRARY_PATH only at process start.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

try:  # tests/ on sys.path (rootdir-relative "prepend" import of a non-package tests/)
    from fakenvml import (
        LIB_NAME,
        FakeNvmlBuildError,
        build_fake_nvml,
        fake_nvml_env,
        gcc_path,
        run_json,
        write_fake_nvml_state,
    )
except ImportError:  # tests/ is a package
    from tests.fakenvml import (  # type: ignore[no-redef]
        LIB_NAME,
        FakeNvmlBuildError,
        build_fake_nvml,
        fake_nvml_env,
        gcc_path,
        run_json,
        write_fake_nvml_state,
    )

pynvml = pytest.importorskip("pynvml", reason="nvidia-ml-py (pynvml) is not installed")

MIB = 1024 * 1024
H200_GPUS = [
    ("NVIDIA H200", 143771, "GPU-00000000-0000-0000-0000-000000000000"),
    ("NVIDIA H200", 143771, "GPU-00000000-0000-0000-0000-000000000001"),
]


@pytest.fixture(scope="session")
def fake_nvml_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if gcc_path() is None:
        pytest.skip("gcc not found on PATH: cannot compile the fake libnvidia-ml.so.1")
    try:
        return build_fake_nvml(tmp_path_factory.mktemp("fakenvml"))
    except FakeNvmlBuildError as exc:
        pytest.skip(f"could not compile the fake libnvidia-ml.so.1: {exc}")


INVENTORY = """
    import json, pynvml
    pynvml.nvmlInit()
    out = {
        "driver": pynvml.nvmlSystemGetDriverVersion(),
        "nvml": pynvml.nvmlSystemGetNVMLVersion(),
        "cuda": pynvml.nvmlSystemGetCudaDriverVersion(),
        "cuda_v2": pynvml.nvmlSystemGetCudaDriverVersion_v2(),
        "count": pynvml.nvmlDeviceGetCount(),
        "gpus": [],
    }
    for i in range(out["count"]):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        mem = pynvml.nvmlDeviceGetMemoryInfo(h)
        uuid = pynvml.nvmlDeviceGetUUID(h)
        by_uuid = pynvml.nvmlDeviceGetHandleByUUID(uuid)
        out["gpus"].append({
            "index": pynvml.nvmlDeviceGetIndex(h),
            "index_by_uuid": pynvml.nvmlDeviceGetIndex(by_uuid),
            "name": pynvml.nvmlDeviceGetName(h),
            "uuid": uuid,
            "total": mem.total, "free": mem.free, "used": mem.used,
            "bus_id": pynvml.nvmlDeviceGetPciInfo(h).busId,
            "cc": list(pynvml.nvmlDeviceGetCudaComputeCapability(h)),
        })
    pynvml.nvmlShutdown()
    print(json.dumps(out, default=lambda b: b.decode()))
"""


def test_default_inventory(fake_nvml_dir: Path) -> None:
    out = run_json(INVENTORY, fake_nvml_env(fake_nvml_dir))
    assert out["driver"] == "560.35.03"
    assert out["nvml"] == "12.560.35.03"
    assert out["cuda"] == out["cuda_v2"] == 12060
    assert out["count"] == 2
    gpus = out["gpus"]
    assert isinstance(gpus, list)
    assert [g["name"] for g in gpus] == ["NVIDIA Fake GPU"] * 2
    assert [g["uuid"] for g in gpus] == ["GPU-fake-0000", "GPU-fake-0001"]
    assert [g["index"] for g in gpus] == [g["index_by_uuid"] for g in gpus] == [0, 1]
    for g in gpus:
        assert g["total"] == 16384 * MIB
        assert g["free"] == g["total"]
        assert g["used"] == 0
        assert g["cc"] == [9, 0]
    assert gpus[0]["bus_id"] != gpus[1]["bus_id"]
    assert str(gpus[0]["bus_id"]).startswith("00000000:")


def test_configured_inventory(fake_nvml_dir: Path) -> None:
    gpus_cfg = [*H200_GPUS, ("NVIDIA A100-SXM4-80GB", 81920, "GPU-a100", "8.0")]
    env = fake_nvml_env(fake_nvml_dir, gpus_cfg, driver_version="550.54.15", cuda_version=12040)
    assert env["FAKE_NVML_GPUS"].count(";") == 2
    out = run_json(INVENTORY, env)
    assert out["driver"] == "550.54.15"
    assert out["cuda"] == 12040
    assert out["count"] == 3
    gpus = out["gpus"]
    assert isinstance(gpus, list)
    assert [(g["name"], g["total"], g["uuid"]) for g in gpus] == [
        (name, mib * MIB, uuid) for name, mib, uuid, *_ in gpus_cfg
    ]
    assert [g["cc"] for g in gpus] == [[9, 0], [9, 0], [8, 0]]


def test_zero_gpus(fake_nvml_dir: Path) -> None:
    out = run_json(INVENTORY, fake_nvml_env(fake_nvml_dir, []))
    assert out["count"] == 0
    assert out["gpus"] == []


ERRORS = """
    import json, pynvml
    def attempt(fn, *args):
        try:
            return repr(fn(*args))
        except pynvml.NVMLError as exc:
            return [type(exc).__name__, exc.value, str(exc)]
    out = {"init": attempt(pynvml.nvmlInit)}
    if out["init"] == "None":
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        out["serial"] = attempt(pynvml.nvmlDeviceGetSerial, h)
        out["fan"] = attempt(pynvml.nvmlDeviceGetFanSpeed, h)
        out["bad_index"] = attempt(pynvml.nvmlDeviceGetHandleByIndex, 99)
        out["bad_uuid"] = attempt(pynvml.nvmlDeviceGetHandleByUUID, "GPU-nope")
        out["shutdown"] = attempt(pynvml.nvmlShutdown)
        out["after_shutdown"] = attempt(pynvml.nvmlDeviceGetCount)
        out["shutdown_again"] = attempt(pynvml.nvmlShutdown)
    print(json.dumps(out))
"""


def test_fail_init_is_driver_not_loaded(fake_nvml_dir: Path) -> None:
    out = run_json(ERRORS, fake_nvml_env(fake_nvml_dir, fail_init=True))
    assert out["init"] == [
        "NVMLError_DriverNotLoaded",
        pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
        "Driver Not Loaded",
    ]
    out = run_json(ERRORS, fake_nvml_env(fake_nvml_dir, fail_init=18))
    assert out["init"][:2] == ["NVMLError_LibRmVersionMismatch", 18]


def test_unimplemented_function_and_error_paths(fake_nvml_dir: Path) -> None:
    out = run_json(ERRORS, fake_nvml_env(fake_nvml_dir))
    assert out["init"] == "None"
    not_found = ["NVMLError_FunctionNotFound", pynvml.NVML_ERROR_FUNCTION_NOT_FOUND]
    assert out["serial"][:2] == not_found
    assert out["fan"][:2] == not_found
    assert out["bad_index"][:2] == ["NVMLError_InvalidArgument", 2]
    assert out["bad_uuid"][:2] == ["NVMLError_NotFound", 6]
    assert out["shutdown"] == "None"
    assert out["after_shutdown"][:2] == ["NVMLError_Uninitialized", 1]
    assert out["shutdown_again"][:2] == ["NVMLError_Uninitialized", 1]


def test_malformed_gpu_spec_fails_init(fake_nvml_dir: Path) -> None:
    env = fake_nvml_env(fake_nvml_dir)
    env["FAKE_NVML_GPUS"] = "NVIDIA H200|lots|GPU-x"
    out = run_json(ERRORS, env)
    assert out["init"][:2] == ["NVMLError_Unknown", 999]


TELEMETRY = """
    import json, os, pynvml
    def sample(i):
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            mem2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
            util = pynvml.nvmlDeviceGetUtilizationRates(h)
            return {
                "used": mem.used, "free": mem.free, "total": mem.total,
                "used_v2": mem2.used, "total_v2": mem2.total, "reserved_v2": mem2.reserved,
                "util_gpu": util.gpu, "util_mem": util.memory,
                "temp": pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
                "temp_v": pynvml.nvmlDeviceGetTemperatureV(h, pynvml.NVML_TEMPERATURE_GPU),
                "power": pynvml.nvmlDeviceGetPowerUsage(h),
                "limit": pynvml.nvmlDeviceGetEnforcedPowerLimit(h),
            }
        except pynvml.NVMLError as exc:
            return type(exc).__name__
    pynvml.nvmlInit()
    out = {"first": [sample(0), sample(1)]}
    with open(os.environ["FAKE_NVML_STATE"], "w") as f:
        f.write("# changed\\n0 util_gpu 7\\n1 lost 1\\n")
    out["second"] = [sample(0), sample(1)]
    print(json.dumps(out))
"""


def test_state_file_telemetry(fake_nvml_dir: Path, tmp_path: Path) -> None:
    state = tmp_path / "nvml_state"
    write_fake_nvml_state(
        state,
        {
            0: {
                "util_gpu": 93,
                "util_mem": 41,
                "mem_used_mib": 70000,
                "temp_c": 71,
                "power_mw": 612345,
                "power_limit_mw": 700000,
            },
            1: {"mem_used_mib": 999999},  # more than total: clamps to total
        },
    )
    out = run_json(TELEMETRY, fake_nvml_env(fake_nvml_dir, H200_GPUS, state=state))
    g0, g1 = out["first"]
    total = 143771 * MIB
    assert g0 == {
        "used": 70000 * MIB,
        "free": total - 70000 * MIB,
        "total": total,
        "used_v2": 70000 * MIB,
        "total_v2": total,
        "reserved_v2": 0,
        "util_gpu": 93,
        "util_mem": 41,
        "temp": 71,
        "temp_v": 71,
        "power": 612345,
        "limit": 700000,
    }
    assert (g1["used"], g1["free"], g1["util_gpu"]) == (total, 0, 0)
    # The file is re-read on every call: new values, and GPU 1 now "fell off the bus".
    g0, g1 = out["second"]
    assert (g0["util_gpu"], g0["used"], g0["temp"]) == (7, 0, 35)
    assert g1 == "NVMLError_GpuIsLost"


def test_in_process_load_by_path_and_reinit(fake_nvml_dir: Path) -> None:
    """Without LD_LIBRARY_PATH: preloading by path satisfies pynvml's dlopen (soname),
    and nvmlInit after a full shutdown re-reads FAKE_NVML_* from the environment."""
    env = fake_nvml_env(fake_nvml_dir, [])
    env.pop("LD_LIBRARY_PATH")
    script = f"""
        import ctypes, json, os, pynvml
        ctypes.CDLL({str(fake_nvml_dir / LIB_NAME)!r})
        pynvml.nvmlInit()
        first = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
        os.environ["FAKE_NVML_GPUS"] = "NVIDIA H200|143771|GPU-h200"
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        print(json.dumps([first, pynvml.nvmlDeviceGetCount(), pynvml.nvmlDeviceGetName(h)]))
    """
    assert run_json(script, env) == [0, 1, "NVIDIA H200"]


def test_build_is_cached(fake_nvml_dir: Path) -> None:
    lib = fake_nvml_dir / LIB_NAME
    before = lib.stat().st_mtime_ns
    assert build_fake_nvml(fake_nvml_dir) == fake_nvml_dir
    assert lib.stat().st_mtime_ns == before


def test_fake_nvml_env_helper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/x")
    monkeypatch.setenv("FAKE_NVML_CUDA_VERSION", "1")  # inherited: must be dropped
    env = fake_nvml_env(
        tmp_path, [("A", 1, "GPU-a")], fail_init=False, CUDA_VISIBLE_DEVICES="0", state=tmp_path
    )
    assert env["LD_LIBRARY_PATH"] == f"{tmp_path.resolve()}{os.pathsep}/opt/x"
    assert env["FAKE_NVML_GPUS"] == "A|1|GPU-a"
    assert env["FAKE_NVML_FAIL_INIT"] == "0"
    assert env["FAKE_NVML_STATE"] == str(tmp_path)
    assert env["CUDA_VISIBLE_DEVICES"] == "0"
    assert "FAKE_NVML_CUDA_VERSION" not in env
    with pytest.raises(ValueError):
        fake_nvml_env(tmp_path, [("bad|name", 1, "GPU-a")])
    with pytest.raises(ValueError):
        write_fake_nvml_state(tmp_path / "s", {0: {"bogus": 1}})


TELEMETRY_EXTRA = """
    import json, pynvml
    def attempt(fn, *args):
        try:
            value = fn(*args)
            return value if isinstance(value, (int, list)) else repr(value)
        except pynvml.NVMLError as exc:
            return type(exc).__name__
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    events = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, events)
    before = attempt(pynvml.nvmlEventSetWait_v2, events, 0)
    with open(os.environ["FAKE_NVML_STATE"], "a") as f:
        f.write("0 xid 79\\n0 xid_events 3\\n")
    data = pynvml.nvmlEventSetWait_v2(events, 0)
    out = {
        "sm": attempt(pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_SM),
        "mem_clock": attempt(pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_MEM),
        "reasons": attempt(pynvml.nvmlDeviceGetCurrentClocksEventReasons, h),
        "reasons_old": attempt(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons, h),
        "ecc": [attempt(pynvml.nvmlDeviceGetTotalEccErrors, h, kind, pynvml.NVML_VOLATILE_ECC)
                for kind in (0, 1)],
        "procs": [[p.pid, p.usedGpuMemory] for p in
                  pynvml.nvmlDeviceGetComputeRunningProcesses(h)],
        "procs_v2": len(pynvml.nvmlDeviceGetComputeRunningProcesses_v2(h)),
        "idle_procs": pynvml.nvmlDeviceGetComputeRunningProcesses(
            pynvml.nvmlDeviceGetHandleByIndex(1)),
        "temp": attempt(pynvml.nvmlDeviceGetTemperature, h, pynvml.NVML_TEMPERATURE_GPU),
        "before": before,
        "event": [pynvml.nvmlDeviceGetIndex(data.device), data.eventType, data.eventData],
        "after": [attempt(pynvml.nvmlEventSetWait_v2, events, 0) for _ in range(3)],
        "graphics": attempt(pynvml.nvmlDeviceGetGraphicsRunningProcesses_v3, h),
    }
    pynvml.nvmlEventSetFree(events)
    print(json.dumps(out))
"""


def test_clocks_ecc_processes_and_xid_events(fake_nvml_dir: Path, tmp_path: Path) -> None:
    state = tmp_path / "nvml_state"
    write_fake_nvml_state(
        state,
        {0: {"sm_clock_mhz": 1755, "throttle": 0x44, "ecc_corrected": 5, "ecc_uncorrected": 1}},
        procs={0: [(4242, 3000), (4343, 1)]},
    )
    env = fake_nvml_env(fake_nvml_dir, H200_GPUS, state=state, missing="nvmlDeviceGetTemperature")
    out = run_json("import os\n" + textwrap.dedent(TELEMETRY_EXTRA), env)
    assert (out["sm"], out["mem_clock"]) == (1755, 2619)
    assert out["reasons"] == out["reasons_old"] == 0x44
    assert out["ecc"] == [5, 1]
    assert out["procs"] == [[4242, 3000 * MIB], [4343, 1 * MIB]]
    assert out["procs_v2"] == 2
    assert out["idle_procs"] == []
    assert out["temp"] == "NVMLError_FunctionNotFound"  # FAKE_NVML_MISSING
    # Events raised before registration are not handed out; each later one is, once.
    assert out["before"] == "NVMLError_Timeout"
    assert out["event"] == [0, pynvml.nvmlEventTypeXidCriticalError, 79]
    assert [a == "NVMLError_Timeout" for a in out["after"]] == [False, False, True]
    assert out["graphics"] == "NVMLError_FunctionNotFound"  # absent from the library


DCGM_READ = """
import dataclasses, json
from gpuyard.adapters.gpus.nvml import NvmlTelemetry
telemetry = NvmlTelemetry()
first = telemetry.read([0, 1], processes=False)
second = telemetry.read([0, 1], processes=False)
telemetry.close()
print(json.dumps([[dataclasses.asdict(r) for r in first], [dataclasses.asdict(r) for r in second]]))
"""


def test_dcgm_counters_through_the_servers_reader(fake_nvml_dir: Path, tmp_path: Path) -> None:
    """The calls behind dcgm-exporter's counters (issue 24), through the server's NVML reader:
    GPM needs two samples; a GPU without GPM or NVLink, or a driver without a function, n/a."""
    state = tmp_path / "state"
    write_fake_nvml_state(state, {
        0: {"tensor_pct": 37, "nvlink_links": 2, "nvlink_tx_kib": 10, "nvlink_rx_kib": 5,
            "energy_mj": 42, "remap_unc": 3, "mem_reserved_mib": 100, "mem_used_mib": 1000},
        1: {"gpm": 0},
    })  # fmt: skip
    env = fake_nvml_env(fake_nvml_dir, state=state)  # PYTHONPATH inherited: this checkout
    first, second = run_json(DCGM_READ, env)
    assert first[0]["tensor_active_pct"] is None  # one GPM sample: no interval yet
    g0, g1 = second
    assert (g0["tensor_active_pct"], g0["nvlink_kib"], g0["energy_mj"]) == (37.0, 30, 42)
    assert (g0["remapped_rows_uncorrectable"], g0["row_remap_failed"]) == (3, False)
    assert (g0["memory_used_mib"], g0["memory_reserved_mib"]) == (1000, 100)
    assert (g0["memory_temp_c"], g0["mem_clock_mhz"]) == (45, 2619)
    assert g0["driver_version"] == "560.35.03"
    assert g1["tensor_active_pct"] is None and g1["nvlink_kib"] is None
    old = fake_nvml_env(
        fake_nvml_dir, state=state,
        missing="nvmlDeviceGetFieldValues,nvmlGpmSampleAlloc,nvmlDeviceGetMemoryInfo_v2",
    )  # fmt: skip
    _, [o0, _] = run_json(DCGM_READ, old)
    assert (o0["memory_temp_c"], o0["tensor_active_pct"], o0["memory_reserved_mib"]) == (
        None,
        None,
        None,
    )
    assert o0["memory_used_mib"] == 1000 and o0["energy_mj"] == 42  # the rest still read
