"""`gpuyard doctor` and `gpuyard submit --check`: gather the facts here (`doctor/gather.py`, as
every machine's agent does for `doctor --node`, `doctor_nodes.py`), judge them in
`gpuyard.doctor.checks`, print one line per check (or JSON)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpuyard.doctor import compat
from gpuyard.doctor.checks import framework_checks, run_checks
from gpuyard.doctor.gather import machine_facts
from gpuyard.doctor.model import (
    Check,
    DriverFacts,
    Facts,
    PythonFacts,
    RocmFacts,
    ServerFacts,
    Status,
    summarize,
)  # fmt: skip
from gpuyard.doctor.probes.amd_facts import read_rocm_facts
from gpuyard.doctor.probes.driver_facts import read_driver_facts
from gpuyard.doctor.probes.frameworks import job_python, probe_python
from gpuyard.domain.errors import GpuyardError

_SERVER_TIMEOUT_S = 3.0


def run_doctor(json_out: bool, state_dir: str | None, python: str | None) -> int:
    """Every check of this machine; the exit status: 1 if any FAILed."""
    from gpuyard.settings import default_state_dir

    folder = Path(state_dir).expanduser() if state_dir else default_state_dir()
    facts = replace(machine_facts(folder, python), server=server_facts())
    checks = run_checks(facts)
    if json_out:
        payload = {"checks": [c.to_json() for c in checks], "summary": json_summary(facts, checks)}
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
    else:
        sys.stdout.write("".join(check_line(c) + "\n" for c in checks))
    return 1 if any(c.status is Status.FAIL for c in checks) else 0


def json_summary(facts: Facts, checks: list[Check]) -> dict[str, Any]:
    """`--json`'s summary: the counts by status, and the machine's GPUs, driver, CUDA, Python."""
    driver = facts.driver
    summary: dict[str, Any] = dict(summarize(checks))
    summary.update(
        gpus=len(driver.gpus), driver=driver.driver_version,
        cuda=compat.cuda_text(driver.cuda_version) if driver.cuda_version else None,
        python=facts.python.executable if facts.python else None,
    )  # fmt: skip
    if facts.rocm is not None and facts.rocm.gpus:  # AMD GPUs: their count and ROCm
        summary.update(amd_gpus=len(facts.rocm.gpus), rocm=facts.rocm.rocm_version)
    return summary


def check_line(check: Check) -> str:
    """`PASS  name: message  (hint)`."""
    hint = f"  ({check.hint})" if check.hint else ""
    return f"{check.status.value.upper():<4}  {check.name}: {check.message}{hint}"


def server_facts() -> ServerFacts:
    """Which GPUs a running server uses, if one answers at GPUYARD_URL (optional)."""
    from gpuyard.client import Client

    try:
        # No retries: a server is optional here, and a doctor run with none must not wait
        # out the client's 30 s of riding through a restart.
        client = Client(timeout_s=_SERVER_TIMEOUT_S, retry_s=0)
    except GpuyardError as exc:
        return ServerFacts(os.environ.get("GPUYARD_URL", "?"), False, error=exc.message)
    try:
        with client:
            info = client.info()
            gpus = client.gpus()
    except GpuyardError as exc:
        return ServerFacts(client.url, False, error=exc.message)
    detected = sum(1 for g in gpus if g.get("detected"))
    return ServerFacts(
        client.url, True, gpus_source=str(info.get("gpus_source")),
        detected_gpus=detected, declared_gpus=len(gpus) - detected,
        confinement=info.get("confinement"),
    )  # fmt: skip


def check_submission(argv: Sequence[str], fields: dict[str, Any]) -> None:
    """`submit --check`: the job's frameworks against this machine's driver and GPUs.

    Raises GpuyardError (one line: nothing is queued) if a check FAILs; WARNs go to stderr.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUYARD_")}
    env.update(fields.get("env") or {})
    workdir = str(fields.get("workdir") or os.getcwd())
    if fields.get("container"):
        skipped = "the job runs in a container image: framework checks skipped (not this Python)"
        _warn(Check("python", Status.WARN, skipped))
        return
    python, why = _chosen_python(fields, env)
    if why is not None:  # --python/--venv that cannot run: the launch would fail
        raise GpuyardError(f"--check: the job cannot start: {why}")
    if python is None:
        python, why = job_python(argv, env, workdir)
    if python is None:
        if os.path.basename(argv[0]).startswith("python"):
            raise GpuyardError(f"--check: the job cannot start: {why}")
        _warn(Check("python", Status.WARN, f"{why}: framework checks skipped"))
        return
    facts = probe_python(python, env=env, cwd=workdir)
    checks = judge_submission(
        facts, read_driver_facts(), int(fields.get("gpus") or 0), read_rocm_facts()
    )
    failed = [c for c in checks if c.status is Status.FAIL]
    for check in checks:
        if check.status is Status.WARN:
            _warn(check)
    if failed:
        first = failed[0]
        more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
        hint = f"; {first.hint}" if first.hint else ""
        raise GpuyardError(f"--check refused the job: {first.name}: {first.message}{hint}{more}")


def _chosen_python(fields: dict[str, Any], env: dict[str, str]) -> tuple[str | None, str | None]:
    """The interpreter `--python` or `--venv` gives the job (its PATH and VIRTUAL_ENV set in
    `env` as the server sets them, `services/launch/plan.py`), or (None, why not); (None, None):
    neither was given."""
    venv, python = fields.get("venv"), fields.get("python")
    if venv:
        python = os.path.join(str(venv), "bin", "python")
        env["PATH"] = os.path.join(str(venv), "bin") + os.pathsep + env.get("PATH", "")
        env["VIRTUAL_ENV"] = str(venv)
        env.pop("PYTHONHOME", None)
        what = f"--venv {venv}: {python}"
    elif python:
        env["PATH"] = os.path.dirname(str(python)) + os.pathsep + env.get("PATH", "")
        env.pop("PYTHONHOME", None)
        what = f"--python {python}"
    else:
        return None, None
    if not (os.path.isfile(str(python)) and os.access(str(python), os.X_OK)):
        return None, f"{what} is not an executable file"
    return str(python), None


def judge_submission(
    python: PythonFacts, driver: DriverFacts, gpus: int, rocm: RocmFacts | None = None
) -> list[Check]:
    """The framework checks of a job asking for `gpus` GPUs (AMD ones too, with `rocm`)."""
    return framework_checks(python, driver, gpus_requested=gpus, rocm=rocm)


def _warn(check: Check) -> None:
    hint = f" ({check.hint})" if check.hint else ""
    sys.stderr.write(f"gpuyard: --check: {check.name}: {check.message}{hint}\n")
