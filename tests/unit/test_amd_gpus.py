"""AMD GPUs through gpuyard's amdsmi adapter: detection, `--gpus auto` on AMD-only and mixed
machines, and telemetry, with AMD's real amdsmi binding against the project's fake
libamd_smi.so (and the fake NVML beside it). Each case runs in a subprocess: both libraries
are found when the bindings load them, from the environment."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tests.fakeamdsmi import (
    amdsmi_missing,
    build_fake_amdsmi,
    fake_amdsmi_env,
    write_fake_amdsmi_state,
)
from tests.fakenvml import build_fake_nvml, fake_nvml_env, run_json, write_fake_nvml_state

from gpuyard.adapters.gpus.amd import THROTTLE_NAMES, throttle_names
from gpuyard.services.machine.gpu_health import hot_gpus
from gpuyard.services.machine.telemetry import GpuTelemetry, TelemetrySnapshot
from gpuyard.services.ports import GpuReading

needs_fakes = pytest.mark.skipif(amdsmi_missing() is not None, reason=str(amdsmi_missing()))
MI300X = [("AMD Instinct MI300X", 196592, f"00ff74a1-0000-1000-80aa-00000000000{i}", "gfx942",
           f"SN30{i}", "SPX", "NPS1") for i in range(2)]  # fmt: skip
H200 = [("NVIDIA H200", 143771, f"GPU-0000000{i}-aaaa-bbbb-cccc-000000000000") for i in range(2)]


@pytest.fixture(scope="module")
def rocm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fake_amdsmi(tmp_path_factory.mktemp("rocm"))


@pytest.fixture(scope="module")
def nvml(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fake_nvml(tmp_path_factory.mktemp("nvml"))


SCRIPT = """
    import dataclasses, json
    from gpuyard.adapters.gpus.select import NoGpuDriver, choose_gpus
    from gpuyard.adapters.gpus.telemetry import open_gpu_telemetry
    gpus, source = choose_gpus("auto")
    out = {"source": source, "gpus": [dataclasses.asdict(g) for g in gpus], "reads": []}
    if gpus:
        telemetry = open_gpu_telemetry(gpus)
        for _ in range(2):
            out["reads"].append([dataclasses.asdict(r) for r in
                                 telemetry.read([g.index for g in gpus], processes=True)])
        telemetry.close()
    print(json.dumps(out))
"""


def run(env: dict[str, str]) -> dict[str, object]:
    return run_json(SCRIPT, env)  # type: ignore[no-any-return]


@needs_fakes
def test_auto_detects_amd_gpus_with_their_arch_serial_and_partitions(
    rocm: Path, nvml: Path, tmp_path: Path
) -> None:
    state = tmp_path / "amd"
    write_fake_amdsmi_state(
        state,
        {0: {"gfx_activity": 91, "umc_activity": 40, "vram_used_mib": 8000, "temp_hotspot_c": 77,
             "power_w": 640, "power_limit_w": 750, "gfx_clock_mhz": 2000, "ecc_correctable": 4},
         1: {"violation": 2, "ecc_uncorrectable": 1}},
        procs={0: [(777, 7900)]},
    )  # fmt: skip
    no_nvidia = fake_nvml_env(nvml, fail_init=True)
    out = run(fake_amdsmi_env(rocm, MI300X, base=no_nvidia, state=state))
    assert out["source"] == "2 GPUs detected by amdsmi"
    gpus = out["gpus"]
    assert isinstance(gpus, list)
    seen = [(g["index"], g["name"], g["memory_total_mib"], g["uuid"], g["vendor"], g["arch"],
             g["serial"], g["compute_partition"], g["memory_partition"], g["device_index"])
            for g in gpus]  # fmt: skip
    assert seen == [
        (i, name, mib, uuid, "amd", gfx, serial, "SPX", "NPS1", i)
        for i, (name, mib, uuid, gfx, serial, _, _) in enumerate(MI300X)
    ]
    assert all(g["detected"] and g["pci_bus_id"] for g in gpus)
    first, second = out["reads"][0]  # type: ignore[index]
    assert (first["util_pct"], first["memory_util_pct"]) == (91, 40)
    assert (first["memory_used_mib"], first["memory_total_mib"]) == (8000, 196592)
    assert (first["temperature_c"], first["power_w"], first["power_limit_w"]) == (77, 640, 750)
    assert first["sm_clock_mhz"] == 2000 and first["throttle_reasons"] == []
    assert (first["ecc_corrected"], first["ecc_uncorrected"]) == (4, 0)
    assert first["processes"] == [  # attributed to a job by the server (this machine's pid)
        {"pid": 777, "memory_used_mib": 7900, "job_id": None, "attributed": False}
    ]
    assert (first["xid_events"], first["last_xid"], first["error"]) == (None, None, None)
    assert second["throttle_reasons"] == ["package_power"] and second["ecc_uncorrected"] == 1
    assert second["processes"] == []


@needs_fakes
def test_a_lost_gpu_reads_as_an_error_and_unsupported_functions_as_na(
    rocm: Path, nvml: Path, tmp_path: Path
) -> None:
    state = tmp_path / "amd"
    write_fake_amdsmi_state(state, {1: {"lost": 1}})
    env = fake_amdsmi_env(
        rocm, MI300X, base=fake_nvml_env(nvml, fail_init=True), state=state,
        missing="amdsmi_get_power_info,amdsmi_get_violation_status,amdsmi_get_gpu_process_list",
    )  # fmt: skip
    out = run(env)
    for ok, lost in out["reads"]:  # type: ignore[attr-defined]
        assert ok["error"] is None and ok["util_pct"] == 0 and ok["memory_used_mib"] == 0
        assert (ok["power_w"], ok["throttle_reasons"], ok["processes"]) == (None, None, None)
        assert lost["error"].startswith("amdsmi: I/O error") and lost["util_pct"] is None


@needs_fakes
def test_a_machine_with_both_lists_nvidia_then_amd_and_reads_each_through_its_library(
    rocm: Path, nvml: Path, tmp_path: Path
) -> None:
    nv_state, amd_state = tmp_path / "nv", tmp_path / "amd"
    write_fake_nvml_state(nv_state, {0: {"util_gpu": 11}, 1: {"util_gpu": 22}})
    write_fake_amdsmi_state(amd_state, {0: {"gfx_activity": 33}, 1: {"gfx_activity": 44}})
    env = fake_amdsmi_env(rocm, MI300X, base=fake_nvml_env(nvml, H200, state=nv_state),
                          state=amd_state)  # fmt: skip
    out = run(env)
    assert out["source"] == "4 GPUs detected (2 by NVML, 2 by amdsmi)"
    gpus = out["gpus"]
    assert isinstance(gpus, list)
    assert [(g["index"], g["vendor"], g["arch"]) for g in gpus] == [
        (0, "nvidia", "9.0"), (1, "nvidia", "9.0"), (2, "amd", "gfx942"), (3, "amd", "gfx942"),
    ]  # fmt: skip
    assert [g["device_index"] for g in gpus[2:]] == [0, 1]  # ROCm's own numbering
    reads = out["reads"][0]  # type: ignore[index]
    assert [(r["index"], r["util_pct"]) for r in reads] == [(0, 11), (1, 22), (2, 33), (3, 44)]


@needs_fakes
def test_neither_library_says_why_for_both(rocm: Path, nvml: Path) -> None:
    env = fake_amdsmi_env(rocm, base=fake_nvml_env(nvml, fail_init=True), fail_init=34)
    out = run(env)
    assert out["gpus"] == []
    source = str(out["source"])
    assert source.startswith("0 GPUs: no NVIDIA driver found (NVML: ")
    assert "; no AMD GPU driver found (amdsmi: AMDSMI_STATUS_DRIVER_NOT_LOADED)" in source
    assert source.endswith("CPU-only jobs still run (declare GPUs with --gpus N)")


def test_throttle_names_and_amd_throttling_counts_as_held_back() -> None:
    status = {"active_ppt_pwr": True, "active_socket_thrm": False, "active_hbm_thrm": True,
              "active_vr_thrm": "N/A"}  # fmt: skip
    assert throttle_names(status) == ("package_power", "hbm_thermal")
    assert throttle_names({}) == ()
    for name in THROTTLE_NAMES:
        reading = GpuReading(0, temperature_c=50, throttle_reasons=(name,))
        snapshot = TelemetrySnapshot(1.0, {0: GpuTelemetry(reading, None)}, 1.0)
        assert hot_gpus(snapshot, 90) == {0: f"clocks held back: {name}"}


@needs_fakes
def test_on_a_mixed_machine_a_library_that_fails_leaves_only_its_gpus_unsampled(
    rocm: Path, nvml: Path
) -> None:
    script = """
        import json
        from gpuyard.adapters.gpus.telemetry import open_gpu_telemetry
        from gpuyard.domain.job import Gpu
        gpus = [Gpu(0, "GPU-0", "NVIDIA H200", 143771, True, vendor="nvidia"),
                Gpu(1, "00ff74a1-0000-1000-80aa-000000000000", "AMD Instinct MI300X", 196592,
                    True, vendor="amd"),
                Gpu(2, "no-such-uuid", "AMD Instinct MI300X", 196592, True, vendor="amd")]
        telemetry = open_gpu_telemetry(gpus)
        print(json.dumps([(r.index, r.util_pct, r.error)
                          for r in telemetry.read([0, 1, 2], processes=False)]))
    """
    env = fake_amdsmi_env(rocm, MI300X[:1], base=fake_nvml_env(nvml, fail_init=True))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    readings = json.loads(proc.stdout.strip().splitlines()[-1])
    assert readings == [
        [1, 0, None],
        [2, None, "amdsmi no longer lists the GPU with UUID no-such-uuid"],
    ]
    assert "telemetry of the NVIDIA GPUs is off: no NVIDIA driver found" in proc.stderr


@needs_fakes
def test_gpus_sharing_a_uuid_are_read_in_amdsmis_order(
    rocm: Path, nvml: Path, tmp_path: Path
) -> None:
    state = tmp_path / "amd"
    write_fake_amdsmi_state(state, {0: {"gfx_activity": 10}, 1: {"gfx_activity": 20}})
    same = [(*MI300X[0][:5], "CPX", "NPS4")] * 2  # two partitions of one board, one UUID
    out = run(fake_amdsmi_env(rocm, same, base=fake_nvml_env(nvml, fail_init=True), state=state))
    gpus = out["gpus"]
    assert isinstance(gpus, list)
    assert [(g["index"], g["compute_partition"]) for g in gpus] == [(0, "CPX"), (1, "CPX")]
    assert [(r["index"], r["util_pct"]) for r in out["reads"][0]] == [(0, 10), (1, 20)]  # type: ignore[index]
