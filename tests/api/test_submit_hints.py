"""Advice at submit that a user coming from sbatch needs: a `--mem 16` is 16 MiB, and a server
without cgroups does not hold a job to its --mem (issue 26)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpuyard.bootstrap import build_app
from gpuyard.settings import Settings


def _client(tmp_path: Path, *, cgroups: bool) -> Iterator[TestClient]:
    settings = Settings(state_dir=tmp_path / "state", gpus="0", cpus=2, job_cgroups=cgroups)
    server, app = build_app(settings)
    with TestClient(app, base_url=settings.url) as client:
        client.headers["Authorization"] = f"Bearer {settings.token_path.read_text().strip()}"
        yield client
        admin = server.auth.principal
        for job in server.reads.list_jobs(admin, include_finished=False):
            server.verbs.cancel(job.id, admin)


@pytest.fixture
def no_cgroups(tmp_path: Path) -> Iterator[TestClient]:
    yield from _client(tmp_path, cgroups=False)


def _submit(client: TestClient, tmp_path: Path, **fields: object) -> dict[str, object]:
    body = {"command": ["sleep", "60"], "workdir": str(tmp_path), **fields}
    answer = client.post("/api/v1/jobs", json=body)
    assert answer.status_code == 201, answer.text
    data: dict[str, object] = answer.json()
    return data


def test_a_bare_small_mem_is_told_it_is_mib_and_an_unenforced_mem_is_told_so(
    no_cgroups: TestClient, tmp_path: Path
) -> None:
    hint = str(_submit(no_cgroups, tmp_path, mem="16")["hint"])
    assert "--mem 16 is 16 MiB" in hint and "did you mean --mem 16G?" in hint
    assert "--mem is advisory on this server (GPUYARD_JOB_CGROUPS=0)" in hint

    hint = str(_submit(no_cgroups, tmp_path, mem="16G")["hint"])
    assert "MiB" not in hint and "--mem is advisory on this server" in hint
    assert _submit(no_cgroups, tmp_path)["hint"] is None  # no --mem: nothing to say


def test_a_mem_with_its_unit_or_a_large_bare_number_gets_no_hint() -> None:
    from gpuyard.domain.units import bare_size_hint

    assert bare_size_hint("16") is not None
    assert bare_size_hint("16G") is None
    assert bare_size_hint("4096") is None  # 4 GiB in MiB: what an sbatch user means
    assert bare_size_hint(None) is None
