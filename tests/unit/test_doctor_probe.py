"""The framework probe, run in a real interpreter, and finding a job's interpreter."""

from __future__ import annotations

import ast
import importlib.util
import os
import sys
from pathlib import Path

import pytest
from tests.fakeframeworks import write_fake_torch

import gpuyard.doctor.probes.frameworks
from gpuyard.doctor.model import FrameworkBuild
from gpuyard.doctor.probes.frameworks import job_python, probe_python


def _env(pythonpath: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return env


def test_the_probe_reports_a_cuda_build_as_its_interpreter_sees_it(tmp_path: Path):
    fake = write_fake_torch(tmp_path, version="2.1.0+cu121", cuda="12.1",
                            archs="sm_80 sm_90 compute_90")  # fmt: skip
    facts = probe_python(sys.executable, env=_env(fake), cwd=str(tmp_path))
    assert facts.error is None
    assert facts.version == ".".join(map(str, sys.version_info[:3]))
    torch, tf, jax = facts.frameworks
    assert torch == FrameworkBuild(
        "torch", True, "2.1.0+cu121", cuda="12.1", cudnn="8.9.2", nccl="2.18.1",
        archs=("sm_80", "sm_90", "compute_90"), cuda_available=False,
    )  # fmt: skip
    assert (tf.name, tf.installed, jax.name, jax.installed) == ("tensorflow", False, "jax", False)


# torch is in the test extra; a venv without it skips this, as test_gpu_mem_hook.py does.
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_the_probe_reports_the_real_cpu_torch_of_this_venv():
    torch = probe_python(sys.executable, env=_env()).frameworks[0]
    assert torch.installed and torch.error is None
    assert torch.version is not None and torch.version.endswith("+cpu")
    assert torch.cuda is None and torch.archs is None


def test_a_torch_that_does_not_import_is_reported_broken(tmp_path: Path):
    fake = write_fake_torch(tmp_path, broken="libcudart.so.12: cannot open shared object file")
    torch = probe_python(sys.executable, env=_env(fake)).frameworks[0]
    assert torch.installed
    assert torch.error == "ImportError: libcudart.so.12: cannot open shared object file"


def test_an_interpreter_that_does_not_exist_is_a_fact_not_a_crash(tmp_path: Path):
    facts = probe_python(str(tmp_path / "nope" / "python"))
    assert facts.error == "No such file or directory"


def _exe(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_the_jobs_interpreter_is_its_python_its_scripts_shebang_or_python3(tmp_path: Path):
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    python = _exe(venv / "python3", "#!/bin/sh\n")
    _exe(venv / "python", "#!/bin/sh\n")
    torchrun = _exe(venv / "torchrun", f"#!{python}\nimport sys\n")
    _exe(tmp_path / "train.py", "#!/usr/bin/env python3\n")
    env = {"PATH": f"{venv}:/usr/bin:/bin"}
    work = str(tmp_path)
    assert job_python(["python", "train.py"], env, work) == (str(venv / "python"), None)
    assert job_python(["torchrun", "train.py"], env, work) == (str(python), None)
    assert job_python(["./train.py"], env, work) == (str(python), None)
    assert job_python(["sh", "-c", "python3 train.py"], env, work) == (str(python), None)
    assert job_python([str(torchrun)], env, work) == (str(python), None)
    assert job_python(["python3.99", "x.py"], env, work) == (
        None, "python3.99 is not on the job's PATH",
    )  # fmt: skip
    assert job_python(["sh"], {"PATH": str(tmp_path / "empty")}, work) == (
        None, "no python3 on the job's PATH",
    )  # fmt: skip


def test_the_probe_script_runs_on_old_interpreters_too():
    # A job's venv may be older than gpuyard's Python: keep the probe's syntax at 3.6.
    probes = Path(gpuyard.doctor.probes.frameworks.__file__).parent
    source = (probes / "probe_script.py").read_text()
    ast.parse(source, feature_version=(3, 6))
