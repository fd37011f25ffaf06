"""The doctor's verdicts, from hand-made facts: CUDA versions, arch lists, CPU builds, no GPU."""

from __future__ import annotations

import pytest

from gpuyard.doctor import compat
from gpuyard.doctor.checks import build_checks, disk_check, persistence_check, run_checks
from gpuyard.doctor.model import (
    Check,
    DiskFacts,
    DriverFacts,
    Facts,
    FrameworkBuild,
    GpuFacts,
    PythonFacts,
    Status,
)  # fmt: skip

TORCH_ARCHS = ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90")


def driver(cuda: tuple[int, int] = (12, 6), cc: tuple[int, int] = (9, 0), n: int = 2,
           persistence: bool | None = True) -> DriverFacts:  # fmt: skip
    gpus = tuple(GpuFacts(i, "NVIDIA H200", cc, persistence) for i in range(n))
    return DriverFacts(driver_version="560.35.03", cuda_version=cuda, gpus=gpus)


def torch(cuda: str | None = "12.4", archs: tuple[str, ...] | None = TORCH_ARCHS,
          **kw: object) -> FrameworkBuild:  # fmt: skip
    version = f"2.4.0+cu{cuda.replace('.', '')}" if cuda else "2.4.0+cpu"
    return FrameworkBuild(
        "torch",
        True,
        version,
        cuda=cuda,
        cudnn="9.1.0",
        nccl="2.20.5",
        archs=archs if cuda else None,
        **kw,
    )  # type: ignore[arg-type]


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


def test_a_cu124_build_on_a_12_2_driver_warns_with_a_hint():
    checks = by_name(build_checks(torch("12.4"), driver(cuda=(12, 2))))
    assert checks["torch"].status is Status.PASS
    verdict = checks["torch cuda"]
    assert verdict.status is Status.WARN
    assert "12.4" in verdict.message and "12.2" in verdict.message
    assert "upgrade the NVIDIA driver" in verdict.hint


def test_a_cu121_build_on_an_11_8_driver_fails():
    verdict = by_name(build_checks(torch("12.1"), driver(cuda=(11, 8))))["torch cuda"]
    assert verdict.status is Status.FAIL
    assert verdict.message == "built for CUDA 12.1, but the driver supports only CUDA 11.8"
    assert "CUDA <= 11.8" in verdict.hint


@pytest.mark.parametrize("build", ["12.4", "12.6", "11.8", "12"])
def test_builds_up_to_the_drivers_cuda_pass(build: str):
    assert compat.cuda_verdict(compat.parse_cuda(build) or (0, 0), (12, 6))[0] is Status.PASS


def test_sm_90_in_the_arch_list_passes_on_a_9_0_gpu():
    checks = by_name(build_checks(torch("12.4"), driver(cc=(9, 0))))
    assert checks["torch arch sm_90"].status is Status.PASS
    assert checks["torch arch sm_90"].message == "GPU 0-1 (NVIDIA H200): native sm_90 kernels"


def test_only_compute_80_ptx_on_a_9_0_gpu_warns_jit():
    build = torch("12.4", archs=("sm_70", "sm_80", "compute_80"))
    check = by_name(build_checks(build, driver(cc=(9, 0))))["torch arch sm_90"]
    assert check.status is Status.WARN
    assert "compute_80 PTX" in check.message and "JIT" in check.message
    assert "sm_90" in check.hint


def test_ptx_cannot_be_jitted_by_a_driver_older_than_the_build():
    build = torch("12.4", archs=("sm_80", "compute_80"))
    checks = by_name(build_checks(build, driver(cuda=(12, 2), cc=(9, 0))))
    assert checks["torch cuda"].status is Status.WARN
    assert checks["torch arch sm_90"].status is Status.FAIL


def test_same_major_cubins_run_on_a_later_minor_but_arch_specific_ones_do_not():
    assert compat.arch_verdict(TORCH_ARCHS, (8, 9)) == (
        Status.PASS, "sm_86 kernels, which run on sm_89",
    )  # fmt: skip
    assert compat.arch_verdict(("sm_90a",), (9, 0))[0] is Status.PASS
    assert compat.arch_verdict(("sm_90a",), (9, 1))[0] is Status.FAIL
    assert compat.arch_verdict(("sm_80",), (7, 5))[0] is Status.FAIL


def test_no_kernels_for_a_newer_gpu_fails_and_names_what_the_build_has():
    check = by_name(build_checks(torch("12.4"), driver(cc=(12, 0))))["torch arch sm_120"]
    assert check.status is Status.FAIL
    assert check.message == "GPU 0-1 (NVIDIA H200): no kernels for sm_120 (has sm_50..sm_90)"


def test_a_cpu_only_torch_on_a_machine_with_gpus_warns():
    checks = build_checks(torch(None), driver(cuda=(12, 2)))
    assert [(c.name, c.status) for c in checks] == [("torch", Status.WARN)]
    assert "this torch cannot use the GPUs" in checks[0].message
    assert "install a CUDA build for CUDA <= 12.2" in checks[0].hint


def test_a_cpu_only_torch_without_gpus_is_fine():
    (check,) = build_checks(torch(None), DriverFacts(absent="no libnvidia-ml.so.1"))
    assert check.status is Status.PASS and "CPU-only build" in check.message


def test_no_gpu_says_so_plainly_and_still_checks_disk_and_frameworks():
    python = PythonFacts(
        "/usr/bin/python3",
        "3.11.7",
        frameworks=(torch(None), FrameworkBuild("tensorflow", False), FrameworkBuild("jax", False)),
    )
    facts = Facts(DriverFacts(absent="no libnvidia-ml.so.1"), python=python,
                  disk=DiskFacts("/srv/gpuyard", free_bytes=200 * 2**30))  # fmt: skip
    checks = run_checks(facts)
    first = checks[0]
    assert (first.name, first.status) == ("nvidia driver", Status.INFO)
    assert first.message.startswith("no NVIDIA GPU/driver found")
    names = [c.name for c in checks[1:]]
    assert names == ["state dir disk", "python", "torch", "tensorflow", "jax"]
    assert not any(c.status is Status.FAIL for c in checks)
    assert by_name(checks)["tensorflow"] == Check("tensorflow", Status.INFO, "not installed")


def test_a_cuda_build_without_a_driver_is_not_failed():
    checks = build_checks(torch("12.4"), DriverFacts(absent="no libnvidia-ml.so.1"))
    assert [(c.name, c.status) for c in checks] == [("torch", Status.PASS)]
    assert checks[0].message == (
        "torch 2.4.0+cu124: CUDA 12.4, cuDNN 9.1.0, NCCL 2.20.5, sm_50..sm_90"
    )


def test_a_job_asking_no_gpu_is_not_failed_by_its_cuda_build():
    checks = build_checks(torch("12.1"), driver(cuda=(11, 8)), gpus_requested=0)
    assert [(c.name, c.status) for c in checks] == [("torch", Status.PASS)]


def test_a_broken_driver_fails_and_an_unloaded_one_warns():
    broken = run_checks(Facts(DriverFacts(error="RM has detected an NVML/RM version mismatch.")))
    assert broken[0].status is Status.FAIL and "reboot" in broken[0].hint
    unloaded = run_checks(Facts(DriverFacts(not_loaded=True, error="Driver Not Loaded")))
    assert unloaded[0].status is Status.WARN


def test_missing_nvml_functions_read_n_a_as_warnings():
    facts = DriverFacts(driver_version="470.1", cuda_version=None,
                        gpus=(GpuFacts(0, "Tesla T4", None, None),))  # fmt: skip
    checks = by_name(run_checks(Facts(facts)))
    assert checks["driver cuda"].status is Status.WARN
    assert checks["gpu 0"] == Check(
        "gpu 0",
        Status.WARN,
        "Tesla T4, compute capability n/a",
        "the driver did not report it; arch checks skipped",
    )
    assert checks["persistence mode"].message == "n/a on GPU 0"
    # No CUDA version and no compute capability: nothing to compare a build with.
    assert [c.status for c in build_checks(torch("12.4"), facts)] == [Status.PASS]


def test_persistence_mode_off_warns_with_the_command_that_fixes_it():
    gpus = driver(n=4).gpus[:2] + tuple(GpuFacts(i, "H200", (9, 0), False) for i in (2, 3))
    check = persistence_check(gpus)
    assert (check.status, check.message) == (Status.WARN, "off on GPU 2-3")
    assert "nvidia-smi -pm 1" in check.hint


@pytest.mark.parametrize(
    ("free_gib", "status"), [(0.5, Status.FAIL), (5, Status.WARN), (50, Status.PASS)]
)
def test_disk_thresholds(free_gib: float, status: Status):
    assert disk_check(DiskFacts("/s", free_bytes=int(free_gib * 2**30))).status is status


def test_an_unwritable_state_dir_fails():
    check = disk_check(DiskFacts("/s", free_bytes=2**40, writable=False))
    assert check.status is Status.FAIL and "not writable" in check.message


def test_a_framework_that_does_not_import_fails():
    build = FrameworkBuild("torch", True, "2.4.0", error="OSError: libcudnn.so.9: cannot open")
    (check,) = build_checks(build, driver())
    assert check.status is Status.FAIL
    assert check.message == "2.4.0 installed but broken: OSError: libcudnn.so.9: cannot open"


def test_version_parsing_and_formatting():
    assert compat.parse_cuda("12.4.1") == (12, 4)
    assert compat.parse_cuda("12") == (12, None)
    assert compat.parse_cuda("cpu") is None
    assert compat.cuda_from_nvml(12060) == (12, 6)
    assert compat.format_cudnn(8902) == "8.9.2"
    assert compat.format_cudnn(90100) == "9.1.0"
    assert compat.span(("sm_80", "sm_90", "compute_90")) == "sm_80..sm_90, compute_90"


def test_job_limits_pass_with_cgroups_and_warn_when_advisory():
    from gpuyard.doctor.checks import confinement_check

    held = confinement_check("cgroup v1 (devices, memory, pids): --mem, ... enforced")
    assert held.status is Status.PASS
    advisory = confinement_check("none (no writable memory controller): ... are advisory")
    assert advisory.status is Status.WARN and "run the server as root" in advisory.hint
