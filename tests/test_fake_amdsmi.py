"""The fake libamd_smi.so drives AMD's real amdsmi binding without an AMD GPU.

Every check runs amdsmi in a subprocess: the binding loads the library when it is imported,
from ROCM_PATH, so each configuration needs a fresh interpreter.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakeamdsmi import (
    FakeAmdSmiBuildError,
    amdsmi_package_dir,
    build_fake_amdsmi,
    fake_amdsmi_env,
    gcc_path,
    write_fake_amdsmi_state,
)
from tests.fakenvml import run_json
from tests.needs import missing

# Only looked up: importing amdsmi here would load (and without the fake, fail to load) the
# library in the test process itself.
if amdsmi_package_dir() is None:
    missing("the amdsmi package is not installed", "the fake libamd_smi.so tests",
            "make test installs it in .venv/amdsmi")  # fmt: skip

MIB = 2**20
MI210 = ("AMD Instinct MI210", 65520, "11ff740f-0000-1000-80aa-000000000000", "gfx90a", "S210")


@pytest.fixture(scope="module")
def rocm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if gcc_path() is None:
        pytest.skip("gcc not found on PATH: cannot compile the fake libamd_smi.so")
    try:
        return build_fake_amdsmi(tmp_path_factory.mktemp("rocm"))
    except FakeAmdSmiBuildError as exc:
        pytest.skip(f"could not compile the fake libamd_smi.so: {exc}")


INVENTORY = """
    import json, amdsmi
    amdsmi.amdsmi_init(amdsmi.AmdSmiInitFlags.INIT_AMD_GPUS)
    gpus = []
    for h in amdsmi.amdsmi_get_processor_handles():
        asic = amdsmi.amdsmi_get_gpu_asic_info(h)
        gpus.append({
            "type": amdsmi.amdsmi_get_processor_type(h)["processor_type"],
            "uuid": amdsmi.amdsmi_get_gpu_device_uuid(h),
            "name": asic["market_name"], "gfx": asic["target_graphics_version"],
            "vendor": asic["vendor_id"],
            "serial": amdsmi.amdsmi_get_gpu_board_info(h)["product_serial"],
            "vram": amdsmi.amdsmi_get_gpu_memory_total(h, amdsmi.AmdSmiMemoryType.VRAM),
            "bdf": amdsmi.amdsmi_get_gpu_device_bdf(h),
            "compute": amdsmi.amdsmi_get_gpu_compute_partition(h),
            "memory": amdsmi.amdsmi_get_gpu_memory_partition(h),
            "render": amdsmi.amdsmi_get_gpu_enumeration_info(h)["drm_render"],
            "driver": amdsmi.amdsmi_get_gpu_driver_info(h)["driver_version"],
        })
    amdsmi.amdsmi_shut_down()
    print(json.dumps({"gpus": gpus, "rocm": amdsmi.amdsmi_get_rocm_version()}))
"""


def test_default_inventory_and_rocm_version(rocm: Path) -> None:
    out = run_json(INVENTORY, fake_amdsmi_env(rocm))
    gpus = out["gpus"]
    assert isinstance(gpus, list) and len(gpus) == 2
    assert {g["name"] for g in gpus} == {"AMD Instinct MI300X"}
    assert {g["gfx"] for g in gpus} == {"gfx942"}
    assert [g["type"] for g in gpus] == ["AMDSMI_PROCESSOR_TYPE_AMD_GPU"] * 2
    assert [g["vram"] for g in gpus] == [196592 * MIB] * 2
    assert [g["serial"] for g in gpus] == ["PFAKE0000", "PFAKE0001"]
    assert [(g["compute"], g["memory"]) for g in gpus] == [("SPX", "NPS1")] * 2
    assert [g["render"] for g in gpus] == [128, 129]
    assert gpus[0]["uuid"] != gpus[1]["uuid"] and gpus[0]["bdf"] != gpus[1]["bdf"]
    assert gpus[0]["vendor"] == "0x1002" and gpus[0]["driver"] == "6.10.5"
    assert out["rocm"] == [True, "6.4.1"]


def test_configured_inventory_partitions_and_versions(rocm: Path) -> None:
    cpx = ("AMD Instinct MI300X", 24576, "22ff74a1-0000-1000-80bb-000000000000", "gfx942",
           "S300", "CPX", "NPS4")  # fmt: skip
    env = fake_amdsmi_env(rocm, [MI210, cpx], driver_version="6.8.5", FAKE_ROCM_VERSION="6.2.4")
    out = run_json(INVENTORY, env)
    gpus = out["gpus"]
    assert isinstance(gpus, list)
    assert [(g["name"], g["gfx"], g["serial"], g["uuid"]) for g in gpus] == [
        (MI210[0], "gfx90a", "S210", MI210[2]), (cpx[0], "gfx942", "S300", cpx[2]),
    ]  # fmt: skip
    assert [(g["compute"], g["memory"]) for g in gpus] == [("SPX", "NPS1"), ("CPX", "NPS4")]
    assert gpus[0]["driver"] == "6.8.5" and out["rocm"] == [True, "6.2.4"]
    none = run_json(INVENTORY, fake_amdsmi_env(rocm, [], FAKE_ROCM_VERSION="fail"))
    assert none["gpus"] == [] and none["rocm"][0] is False


TELEMETRY = """
    import json, amdsmi
    amdsmi.amdsmi_init(amdsmi.AmdSmiInitFlags.INIT_AMD_GPUS)
    def attempt(fn, *args):
        try:
            return fn(*args)
        except amdsmi.AmdSmiLibraryException as exc:
            return ["error", exc.get_error_code()]
    out = []
    T, M = amdsmi.AmdSmiTemperatureType, amdsmi.AmdSmiTemperatureMetric.CURRENT
    for h in amdsmi.amdsmi_get_processor_handles():
        status = attempt(amdsmi.amdsmi_get_violation_status, h)
        listed = attempt(amdsmi.amdsmi_get_gpu_process_list, h)
        out.append({
            "activity": attempt(amdsmi.amdsmi_get_gpu_activity, h),
            "used": attempt(amdsmi.amdsmi_get_gpu_memory_usage, h, amdsmi.AmdSmiMemoryType.VRAM),
            "hotspot": attempt(amdsmi.amdsmi_get_temp_metric, h, T.HOTSPOT, M),
            "edge": attempt(amdsmi.amdsmi_get_temp_metric, h, T.EDGE, M),
            "power": attempt(amdsmi.amdsmi_get_power_info, h),
            "clock": attempt(amdsmi.amdsmi_get_clock_info, h, amdsmi.AmdSmiClkType.GFX),
            "ecc": attempt(amdsmi.amdsmi_get_gpu_total_ecc_count, h),
            "active": status if isinstance(status, list) else
                      {k: v for k, v in status.items() if k.startswith("active_")
                       and isinstance(v, bool)},
            "procs": listed if listed[:1] == ["error"] else
                     [(p["pid"], p["memory_usage"]["vram_mem"]) for p in listed],
            "unsupported": attempt(amdsmi.amdsmi_get_gpu_vram_info, h),
        })
    print(json.dumps(out))
"""


def test_state_file_drives_telemetry_ras_and_processes(rocm: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    write_fake_amdsmi_state(
        state,
        {0: {"gfx_activity": 87, "umc_activity": 30, "vram_used_mib": 4096, "temp_hotspot_c": 81,
             "power_w": 612, "power_limit_w": 700, "gfx_clock_mhz": 1900},
         1: {"ecc_correctable": 5, "ecc_uncorrectable": 2, "violation": 2 | 4}},
        procs={0: [(4242, 3000), (4243, 96)]},
    )  # fmt: skip
    first, second = run_json(TELEMETRY, fake_amdsmi_env(rocm, state=state))
    assert first["activity"]["gfx_activity"] == 87 and first["activity"]["umc_activity"] == 30
    assert first["activity"]["mm_activity"] == "N/A"  # 0xFFFF, as an MI300X answers
    assert first["used"] == 4096 * MIB
    assert (first["hotspot"], first["edge"]) == (81, 35)
    assert first["power"]["current_socket_power"] == 612 and first["power"]["power_limit"] == 700
    assert first["clock"]["clk"] == 1900
    assert first["procs"] == [[4242, 3000 * MIB], [4243, 96 * MIB]]
    assert first["unsupported"] == ["error", 2]  # a stub: AMDSMI_STATUS_NOT_SUPPORTED
    assert second["ecc"] == {"correctable_count": 5, "uncorrectable_count": 2, "deferred_count": 0}
    active = {k for k, v in second["active"].items() if v}
    assert active == {"active_ppt_pwr", "active_socket_thrm"}
    assert not any(first["active"].values())


def test_missing_functions_lost_gpus_and_a_failed_init(rocm: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    write_fake_amdsmi_state(state, {1: {"lost": 1}})
    env = fake_amdsmi_env(rocm, state=state, missing="amdsmi_get_violation_status")
    first, second = run_json(TELEMETRY, env)
    assert first["active"] == ["error", 2] and isinstance(first["activity"], dict)
    assert second["activity"] == ["error", 12] and second["used"] == ["error", 12]  # I/O
    failed = subprocess.run(
        [sys.executable, "-c", "import amdsmi; amdsmi.amdsmi_init()"],
        env=fake_amdsmi_env(rocm, fail_init=34), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert failed.returncode != 0 and "AMDSMI_STATUS_DRIVER_NOT_LOADED" in failed.stderr


def test_the_library_exports_every_function_the_binding_binds(rocm: Path) -> None:
    package = amdsmi_package_dir()
    assert package is not None
    wrapper = package / "amdsmi_wrapper.py"
    bound = set(re.findall(r"_libraries\['libamd_smi\.so'\]\.(\w+)", wrapper.read_text()))
    nm = subprocess.run(["nm", "-D", "--defined-only", str(rocm / "lib" / "libamd_smi.so")],
                        capture_output=True, text=True, check=False)  # fmt: skip
    if nm.returncode != 0:
        pytest.skip("nm (binutils) is not available")
    exported = {line.split()[-1] for line in nm.stdout.splitlines() if line.strip()}
    assert bound - exported == set(), "rerun tests/fakeamdsmi/gen_stubs.py"
