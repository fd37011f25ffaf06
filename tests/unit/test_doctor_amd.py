"""The doctor on AMD GPUs (issue 16): verdicts from hand-made facts (amdgpu driver, ROCm runtime,
gfx targets against torch's and JAX's ROCm builds), and the amdsmi probe run through the real
amdsmi binding against the project's fake libamd_smi.so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuyard.doctor import compat
from gpuyard.doctor.checks import build_checks, rocm_checks, run_checks
from gpuyard.doctor.model import (
    AmdGpuFacts,
    Check,
    DriverFacts,
    Facts,
    FrameworkBuild,
    PythonFacts,
    RocmFacts,
    Status,
)  # fmt: skip

NO_NVIDIA = DriverFacts(absent="no libnvidia-ml.so.1")
TORCH_ROCM_ARCHS = ("gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx1030", "gfx1100")


def rocm(gfx: str | None = "gfx942", n: int = 2, version: str | None = "6.4.1") -> RocmFacts:
    gpus = tuple(AmdGpuFacts(i, "AMD Instinct MI300X", gfx) for i in range(n))
    return RocmFacts(driver_version="6.10.5", rocm_version=version, gpus=gpus)


def torch_rocm(hip: str = "6.2.41133-dd7f95766", archs: tuple[str, ...] = TORCH_ROCM_ARCHS,
               **kw: object) -> FrameworkBuild:  # fmt: skip
    return FrameworkBuild("torch", True, "2.5.1+rocm6.2", rocm=hip, archs=archs, **kw)  # type: ignore[arg-type]


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


def test_driver_runtime_and_gpu_lines() -> None:
    checks = by_name(rocm_checks(rocm(), NO_NVIDIA))
    assert checks["amd driver"].status is Status.PASS
    assert checks["amd driver"].message == "amdgpu 6.10.5, 2 GPU(s)"
    assert checks["rocm"].message == "ROCm runtime 6.4.1"
    assert checks["amd gpu 0-1"].message == "AMD Instinct MI300X, gfx942"
    missing = by_name(rocm_checks(RocmFacts(rocm_error="no librocm-core.so", gpus=rocm().gpus),
                                  NO_NVIDIA))  # fmt: skip
    assert missing["rocm"].status is Status.WARN and "no librocm-core.so" in missing["rocm"].message
    assert missing["amd driver"].status is Status.WARN and missing["amd driver"].hint


def test_no_amd_gpu_is_silent_beside_nvidia_and_a_fact_on_a_cpu_machine() -> None:
    nvidia = DriverFacts(driver_version="560.35.03", cuda_version=(12, 6))
    assert rocm_checks(RocmFacts(absent="no libamd_smi.so"), nvidia) == []
    (info,) = rocm_checks(RocmFacts(absent="no libamd_smi.so"), NO_NVIDIA)
    assert info.status is Status.INFO and "no AMD GPU" in info.message
    (failed,) = rocm_checks(RocmFacts(error="AMDSMI_STATUS_IO"), NO_NVIDIA)
    assert failed.status is Status.FAIL and "amd-smi" in failed.hint


def test_a_torch_rocm_build_with_gfx942_kernels_passes() -> None:
    checks = by_name(build_checks(torch_rocm(), NO_NVIDIA, rocm=rocm()))
    assert checks["torch"].status is Status.PASS and "ROCm 6.2" in checks["torch"].message
    assert checks["torch rocm"].status is Status.PASS
    verdict = checks["torch arch gfx942"]
    assert verdict.status is Status.PASS and "AMD GPU 0-1 (AMD Instinct MI300X)" in verdict.message


def test_a_build_without_the_gpus_gfx_target_fails_with_a_fix() -> None:
    checks = by_name(build_checks(torch_rocm(archs=("gfx90a", "gfx1100")), NO_NVIDIA,
                                  rocm=rocm()))  # fmt: skip
    verdict = checks["torch arch gfx942"]
    assert verdict.status is Status.FAIL
    assert verdict.message.endswith("no kernels for gfx942 (has gfx1100, gfx90a)")
    assert "arch list includes gfx942" in verdict.hint
    # Features on entries and generic targets.
    assert compat.gfx_verdict(("gfx942:sramecc+:xnack-",), "gfx942")[0] is Status.PASS
    assert compat.gfx_verdict(("gfx9-4-generic",), "gfx950")[0] is Status.WARN


def test_a_build_for_a_newer_rocm_than_the_machines_warns() -> None:
    checks = by_name(build_checks(torch_rocm(hip="7.0.51831"), NO_NVIDIA,
                                  rocm=rocm(version="6.4.1")))  # fmt: skip
    assert checks["torch rocm"].status is Status.WARN
    assert "amdgpu driver" in checks["torch rocm"].message and "6.4" in checks["torch rocm"].hint


def test_jax_rocm_plugins_are_judged_by_amds_targets() -> None:
    jax = FrameworkBuild("jax", True, "0.7.1", rocm="7")
    assert by_name(build_checks(jax, NO_NVIDIA, rocm=rocm()))["jax arch gfx942"].status is (
        Status.PASS
    )
    old = by_name(build_checks(jax, NO_NVIDIA, rocm=rocm(gfx="gfx906")))["jax arch gfx906"]
    assert old.status is Status.WARN and "compatibility matrix" in old.hint
    assert compat.parse_rocm("60") == (6, 0) and compat.parse_rocm("7") == (7, None)
    assert compat.parse_rocm("10") == (10, None)


def test_a_cuda_or_cpu_build_on_an_amd_machine_cannot_use_its_gpus() -> None:
    cuda = FrameworkBuild("torch", True, "2.5.1+cu124", cuda="12.4", archs=("sm_90",))
    (verdict,) = build_checks(cuda, NO_NVIDIA, rocm=rocm())
    assert verdict.status is Status.WARN and "cannot use the AMD GPUs" in verdict.message
    assert "ROCm" in verdict.hint
    cpu = FrameworkBuild("torch", True, "2.5.1+cpu")
    assert build_checks(cpu, NO_NVIDIA, rocm=rocm())[0].status is Status.WARN
    # A job asking for no GPU is not judged by them.
    assert build_checks(cpu, NO_NVIDIA, gpus_requested=0, rocm=rocm())[0].status is Status.PASS


def test_run_checks_shows_the_amd_side_and_judges_frameworks_against_it() -> None:
    python = PythonFacts("/usr/bin/python3", "3.11.9", frameworks=(torch_rocm(),))
    checks = by_name(run_checks(Facts(driver=NO_NVIDIA, python=python, rocm=rocm())))
    assert "nvidia driver" in checks and checks["amd driver"].status is Status.PASS
    assert checks["torch arch gfx942"].status is Status.PASS


_PROBE = (
    "import json, dataclasses\n"
    "from gpuyard.doctor.probes.amd_facts import read_rocm_facts\n"
    "print(json.dumps(dataclasses.asdict(read_rocm_facts())))\n"
)


@pytest.fixture(scope="module")
def fake_rocm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    fake = pytest.importorskip("tests.fakeamdsmi")
    if fake.amdsmi_missing():  # only looked up: importing it here would load no library
        pytest.skip(fake.amdsmi_missing())
    try:
        return Path(fake.build_fake_amdsmi(tmp_path_factory.mktemp("rocm")))
    except fake.FakeAmdSmiBuildError as exc:
        pytest.skip(str(exc))


def _probe(env: dict[str, str]) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True,
                         timeout=60, check=True)  # fmt: skip
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def test_the_probe_reads_driver_rocm_and_gfx_through_the_real_amdsmi(fake_rocm: Path) -> None:
    from tests.fakeamdsmi import fake_amdsmi_env

    gpus = [("AMD Instinct MI250X", 65520, "u-0", "gfx90a"),
            ("AMD Instinct MI300X", 196592, "u-1", "gfx942")]  # fmt: skip
    env = fake_amdsmi_env(fake_rocm, gpus, driver_version="6.8.5", FAKE_ROCM_VERSION="6.3.2")
    facts = _probe(env)
    assert facts["driver_version"] == "6.8.5" and facts["rocm_version"] == "6.3.2"
    assert [(g["name"], g["gfx"]) for g in facts["gpus"]] == [  # type: ignore[attr-defined]
        ("AMD Instinct MI250X", "gfx90a"),
        ("AMD Instinct MI300X", "gfx942"),
    ]
    failed = _probe(fake_amdsmi_env(fake_rocm, gpus, FAKE_ROCM_VERSION="fail"))
    assert failed["rocm_version"] is None and failed["rocm_error"]
    not_loaded = _probe(fake_amdsmi_env(fake_rocm, gpus, fail_init=34))
    assert not_loaded["absent"] and not not_loaded["error"]
