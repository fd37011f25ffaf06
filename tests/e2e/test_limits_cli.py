"""`gpuyard admin limit`, `share` and `usage` against a real server: the tables, a refusal in
one line for a second user (with their own token), CSV."""

from __future__ import annotations

import getpass
from pathlib import Path

from tests.e2e.server import ServerProcess


def test_limits_share_and_usage_from_the_cli(server: ServerProcess, tmp_path: Path) -> None:
    server.cli("admin", "team", "add", "vision")
    server.cli("admin", "user", "add", "nobody", "--team", "vision")
    made = server.cli("admin", "limit", "set", "--team", "vision", "--max-gpus", "1",
                      "--max-gpu-hours", "10", "--window", "1d")  # fmt: skip
    header, row = made.stdout.splitlines()
    assert header.split() == ["KIND", "NAME", "MAX_GPUS", "MAX_PENDING", "MAX_GPU_H", "WINDOW",
                              "SHARES"]  # fmt: skip
    assert row.split() == ["team", "vision", "1", "-", "10", "1d", "1"]
    both = server.cli("admin", "limit", "set", "--user", "a", "--team", "b", check=False)
    assert both.returncode == 2 and "exactly one of --user U or --team T" in both.stderr
    me = getpass.getuser()  # the server's user: its first admin
    server.cli("admin", "limit", "set", "--user", me, "--max-gpus", "1", "--shares", "2")
    refused = server.cli("submit", "--gpus", "2", "--", "true", check=False)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1
    assert f"job asks 2 GPUs; user {me} may hold at most 1 GPUs at once" in refused.stderr
    job = server.cli("submit", "--gpus", "1", "--", "true").stdout.strip()
    server.cli("wait", job)
    share = server.cli("share").stdout.splitlines()
    assert share[0].split()[:3] == ["USER", "TEAM", "RAW_SHARES"]
    assert {line.split()[0] for line in share[1:]} >= {"nobody"}
    usage = server.cli("usage", "--csv", "--since", "1d").stdout.splitlines()
    assert usage[0] == "user,jobs,alloc_gpu_h,used_gpu_h,util%,energy_kwh,states"
    assert usage[1].endswith(",COMPLETED=1")
    server.cli("admin", "limit", "clear", "--team", "vision")
    (row,) = server.cli("admin", "limit", "list").stdout.splitlines()[1:]
    assert row.split() == ["user", me, "1", "-", "-", "7d", "2"]
