"""Which token the client sends: GPUYARD_TOKEN, else `gpuyard login`'s, only to the server it
was given for (never to another URL the client is pointed at), else the state dir's."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuyard.client import Client, find_token


@pytest.fixture
def homes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("GPUYARD_TOKEN", raising=False)
    monkeypatch.delenv("GPUYARD_URL", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("GPUYARD_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "token").write_text("state-token\n")
    login = tmp_path / "config" / "gpuyard"
    login.mkdir(parents=True)
    (login / "token").write_text("gpy_login\n")
    (login / "url").write_text("https://gpus.lab.example:8443\n")
    return tmp_path


def test_the_login_token_goes_to_its_server_only(homes: Path) -> None:
    assert find_token("https://GPUS.lab.example:8443/") == "gpy_login"
    assert find_token("http://127.0.0.1:8765") == "state-token"
    assert find_token("https://gpus.lab.example:9999") == "state-token"


def test_a_client_without_a_url_goes_to_the_login_server(homes: Path) -> None:
    client = Client()
    assert client.url == "https://gpus.lab.example:8443"
    assert client._connection.token == "gpy_login"


def test_gpuyard_token_and_url_still_win(homes: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUYARD_URL", "http://127.0.0.1:8765")
    assert Client()._connection.token == "state-token"
    monkeypatch.setenv("GPUYARD_TOKEN", "from-env")
    assert Client()._connection.token == "from-env"
    assert find_token("https://gpus.lab.example:8443") == "from-env"
