"""A server that cannot use the Ray cluster it was given says so in one line and exits, at
once: before, an address with nothing listening held its start for ever inside Ray's client,
deaf to SIGTERM (issue 22)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.e2e.server import GPUYARD, free_port


def _serve(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "GPUYARD_SOCKET": "off", **env}
    argv = [GPUYARD, "server", "--port", str(free_port()), "--state-dir",
            str(tmp_path / "state"), "--backend", "ray", *args]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, env=environ, timeout=120)


def _error_lines(out: subprocess.CompletedProcess[str]) -> list[str]:
    text = out.stdout + out.stderr
    assert "Traceback" not in text, text
    return [ln for ln in text.splitlines() if ln.startswith("gpuyard: ")]


def test_an_address_where_nothing_listens_is_one_line_at_once(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    out = _serve(tmp_path, "--ray-address", address, GPUYARD_RAY_TOKEN="not-the-point")
    assert out.returncode != 0
    (line,) = _error_lines(out)
    assert line.startswith(f"gpuyard: cannot use the Ray cluster ({address}): nothing answers "
                           f"at {address}"), line  # fmt: skip
    assert "ray start --head" in line

