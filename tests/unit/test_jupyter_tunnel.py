"""`gpuyard run --jupyter`'s ssh tunnel hint names a machine the user can reach: never
`localhost` (from the user's own machine, that is the user's own machine)."""

from __future__ import annotations

import socket

import pytest

from gpuyard.cli.jupyter import tunnel_host, tunnel_lines


def _names(monkeypatch: pytest.MonkeyPatch, fqdn: str, hostname: str) -> None:
    monkeypatch.setattr(socket, "getfqdn", lambda name="": fqdn)
    monkeypatch.setattr(socket, "gethostname", lambda: hostname)


@pytest.mark.parametrize("fqdn", ["localhost", "localhost.localdomain", "ip6-localhost", "::1"])
def test_a_loopback_fqdn_gives_way_to_the_host_name(
    monkeypatch: pytest.MonkeyPatch, fqdn: str
) -> None:
    _names(monkeypatch, fqdn, "gpu-box")
    assert tunnel_host("http://127.0.0.1:8765") == "gpu-box"
    assert tunnel_lines(8888, "ada", "gpu-box")[1] == "  ssh -N -L 8888:127.0.0.1:8888 ada@gpu-box"


def test_a_machine_that_knows_itself_only_as_localhost_says_what_to_type(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _names(monkeypatch, "localhost", "localhost")
    host = tunnel_host("http://localhost:8765")
    assert host is None
    intro, command = tunnel_lines(8888, "root", host)
    assert command == "  ssh -N -L 8888:127.0.0.1:8888 root@HOST"
    assert "HOST: the name or address you ssh to this machine by" in intro
    assert "localhost" not in command


def test_a_server_reached_by_name_is_the_tunnels_end(monkeypatch: pytest.MonkeyPatch) -> None:
    _names(monkeypatch, "localhost", "localhost")
    assert tunnel_host("http://gpu.lab.example:8765") == "gpu.lab.example"
    _names(monkeypatch, "gpu-box.lab.example", "gpu-box")
    assert tunnel_host("http://127.0.0.1:8765") == "gpu-box.lab.example"
