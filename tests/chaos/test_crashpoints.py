"""Crash points: off unless named, fatal (SIGKILL) on exactly the Nth hit of the named one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from gpuyard.services.jobs import crashpoints

PROGRAM = (
    "from gpuyard.services.jobs.crashpoints import crash_point\n"
    "for i in range(1, 4):\n"
    "    crash_point('journal_written'); crash_point('launched'); print(i, flush=True)\n"
)


def _run(crash_at: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != crashpoints.ENV_VAR}
    if crash_at is not None:
        env[crashpoints.ENV_VAR] = crash_at
    return subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True,
                          text=True, timeout=60)  # fmt: skip


def test_a_process_dies_by_sigkill_at_the_nth_hit_of_the_named_point() -> None:
    died = _run("launched:2")
    assert died.returncode == -signal.SIGKILL
    assert died.stdout.split() == ["1"]
    assert "crash point launched reached" in died.stderr


def test_unarmed_or_armed_elsewhere_nothing_happens() -> None:
    assert _run(None).stdout.split() == ["1", "2", "3"]
    assert _run("drain_saved").stdout.split() == ["1", "2", "3"]


def test_the_setting_is_read_strictly() -> None:
    assert crashpoints.parse("") == {}
    assert crashpoints.parse("launched, submit_reply:3") == {"launched": 1, "submit_reply": 3}
    with pytest.raises(ValueError, match="unknown crash point 'lanched'"):
        crashpoints.parse("lanched:2")
