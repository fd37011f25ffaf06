"""`gpuyard doctor --node NAME` and `--all` against a real one-box server on loopback: its one
machine checked through the server (a header naming it, the same check lines), an unknown
machine in one line, `--all --json` per machine with its summary."""

from __future__ import annotations

import json
import socket

from tests.e2e.server import ServerProcess


def test_doctor_node_checks_the_servers_machine_through_the_server(server: ServerProcess):
    name = json.loads(server.cli("nodes", "--json").stdout)[0]["name"]
    assert name == socket.gethostname()
    result = server.cli("doctor", "--node", name, check=False)
    assert result.returncode in (0, 1), result.stderr  # 1: a check FAILed on this machine
    lines = result.stdout.splitlines()
    assert lines[0] == f"machine {name}:"
    assert any(line.startswith(("PASS  python:", "FAIL  python:")) for line in lines)
    assert any(f"{server.state_dir}" in line for line in lines if "state dir disk" in line)

    unknown = server.cli("doctor", "--node", "no-such-machine", check=False)
    assert unknown.returncode == 1 and unknown.stdout == ""
    assert unknown.stderr.count("\n") == 1 and "`gpuyard nodes`" in unknown.stderr

    every = server.cli("doctor", "--all", "--json", check=False)
    nodes = json.loads(every.stdout)["nodes"]
    assert [n["node"] for n in nodes] == [name]
    failed = nodes[0]["summary"]["fail"]
    assert every.returncode == (1 if failed else 0)
    assert {c["name"] for c in nodes[0]["checks"]} >= {"python", "state dir disk", "job limits"}

    both = server.cli("doctor", "--node", name, "--all", check=False)
    assert both.returncode == 2 and both.stderr.count("\n") == 1
