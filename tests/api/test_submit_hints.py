"""Advice at submit that a user coming from sbatch needs: a `--mem 16` is 16 MiB, and a server
without cgroups does not hold a job to its --mem (issue 26)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpuyard.bootstrap import build_app
from gpuyard.settings import Settings
from tests.api.served import cancel_unfinished


def _client(tmp_path: Path, *, cgroups: bool) -> Iterator[TestClient]:
    settings = Settings(state_dir=tmp_path / "state", gpus="0", cpus=2, job_cgroups=cgroups)
    server, app = build_app(settings)
    with TestClient(app, base_url=settings.url) as client:
        client.headers["Authorization"] = f"Bearer {settings.token_path.read_text().strip()}"
        yield client
        cancel_unfinished(server)


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
    hint = str(_submit(no_cgroups, tmp_path)["hint"])  # no --mem: the default, not held
    assert hint.startswith("no --mem given: the job is counted (not held: no cgroups here) to")


def test_a_job_without_mem_is_told_the_default_it_got(tmp_path: Path) -> None:
    """The answer's `hint` names the limit a job without --mem got (the server's default per
    CPU, as Slurm's DefMemPerCPU), and that --mem changes it; one with --mem hears nothing."""
    settings = Settings(state_dir=tmp_path / "state", gpus="0", cpus=4, job_cgroups=False,
                        def_mem_per_cpu_mib=256)  # fmt: skip
    server, app = build_app(settings)
    with TestClient(app, base_url=settings.url) as client:
        client.headers["Authorization"] = f"Bearer {settings.token_path.read_text().strip()}"
        answer = _submit(client, tmp_path, cpus=4)
        assert answer["mem_mib"] == 1024
        assert "the default 1G of host RAM, 256M per CPU x 4 (--mem to change it)" in str(
            answer["hint"])  # fmt: skip
        assert _submit(client, tmp_path, mem="2G")["hint"] is not None  # advisory, no default
        assert "no --mem given" not in str(_submit(client, tmp_path, mem="2G")["hint"])
        for job in server.reads.list_jobs(server.auth.principal, include_finished=False):
            server.verbs.cancel(job.id, server.auth.principal)


def test_a_mem_with_its_unit_or_a_large_bare_number_gets_no_hint() -> None:
    from gpuyard.domain.units import bare_size_hint

    assert bare_size_hint("16") is not None
    assert bare_size_hint("16G") is None
    assert bare_size_hint("4096") is None  # 4 GiB in MiB: what an sbatch user means
    assert bare_size_hint(None) is None
