"""`submit -d` on a real server through the real CLI: a job after a failing one stays pending
(DependencyNeverSatisfied, as Slurm leaves it), after a succeeding one it runs; `queue` says
Dependency while it waits; an array's %N holds; a dependency on no job is refused in one line."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.server import ServerProcess, wait_ended, wait_for

# The server fixture's (tests/e2e/conftest.py) options: two declared GPUs.
SERVER_ARGS = ("--gpus", "2", "--cpus", "8", "--kill-grace", "1")


def submit(server: ServerProcess, *args: str) -> str:
    return server.cli("submit", "--gpus", "0", *args).stdout.strip().splitlines()[-1]


def test_afterok_a_failing_job_is_never_satisfied_and_a_succeeding_one_lets_it_run(
    server: ServerProcess, tmp_path: Path
) -> None:
    gate = tmp_path / "go"
    # A waits for a file, so its dependents are seen waiting first.
    wait_then = f"while [ ! -e {gate} ]; do sleep 0.05; done; "
    bad = submit(server, "--", "sh", "-c", wait_then + "exit 3")
    good = submit(server, "--", "sh", "-c", wait_then + "true")
    after_bad = submit(server, "-d", f"afterok:{bad}", "--", "true")
    after_good = submit(server, "--dependency", f"afterok:{good}", "--", "true")
    client = server.client()
    wait_for(lambda: client.job(int(after_bad))["reason"] == "Dependency")
    queue = server.cli("queue").stdout
    assert "Dependency" in queue
    assert client.job(int(after_good))["state"] == "PENDING"
    gate.touch()
    never = wait_for(lambda: (j := client.job(int(after_bad)))["reason"]
                     == "DependencyNeverSatisfied" and j)  # fmt: skip
    assert never["state"] == "PENDING"  # as Slurm: left for its owner to cancel
    assert never["started_at"] is None  # it never ran
    ran = wait_ended(client, after_good)
    assert (ran["state"], ran["exit_code"]) == ("COMPLETED", 0)
    assert wait_ended(client, bad)["state"] == "FAILED"


def test_a_dependency_on_no_job_is_refused_in_one_line(server: ServerProcess) -> None:
    result = server.cli("submit", "-d", "afterok:4242", "--", "true", check=False)
    assert result.returncode != 0
    assert "4242" in result.stderr and "does not exist" in result.stderr
    bad = server.cli("submit", "-d", "afterok:x", "--", "true", check=False)
    assert bad.returncode != 0 and "afterok:x" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_an_array_cap_holds_on_a_real_server(server: ServerProcess, tmp_path: Path) -> None:
    gate = tmp_path / "go"
    out = server.cli("submit", "--gpus", "0", "--array", "0-3%1", "--", "sh", "-c",
                     f"while [ ! -e {gate} ]; do sleep 0.05; done").stdout  # fmt: skip
    array_id = int(out.strip().splitlines()[-1].split("_")[0])
    client = server.client()
    tasks = wait_for(lambda: (t := client.array(array_id)) and
                     any(j["state"] == "RUNNING" for j in t) and t)  # fmt: skip
    assert [j["state"] for j in tasks].count("RUNNING") == 1

    def reasons() -> list[str]:
        return [j["reason"] for j in client.array(array_id) if j["state"] == "PENDING"]

    wait_for(lambda: reasons() == ["JobArrayTaskLimit"] * 3)
    gate.touch()
    for task in tasks:
        assert wait_ended(client, task["id"])["state"] == "COMPLETED"
