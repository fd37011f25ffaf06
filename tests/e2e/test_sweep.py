"""`gpuyard sweep` end to end: a real server with declared GPUs runs a grid sweep of a small
script whose loss depends on its parameter; the trials that fall behind the others are stopped
early with the median rule's reason, the best run to their end, and `sweep show` ranks them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.e2e.server import ServerProcess, wait_for

STEPS = 40
TRAIN = f"""\
import os, time
x = float(os.environ["SWEEP_X"])
assert os.environ["SWEEP_TRIAL"] in "0123"
for step in range(1, {STEPS + 1}):
    loss = x + 1 / step
    print(f"::gpuyard progress step={{step}} total={STEPS} val_loss={{loss:.4f}}", flush=True)
    time.sleep(0.25)
"""
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}


# The server fixture's (tests/e2e/conftest.py) options: two declared GPUs, so two one-GPU
# trials at a time, the good ones first (grid order).
SERVER_ARGS = ("--gpus", "2", "--cpus", "8", "--kill-grace", "1")


def test_a_sweep_stops_its_worst_trials_early_and_ranks_them(
    server: ServerProcess, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text(TRAIN)
    (work / "sweep.toml").write_text(
        f"""\
name = "x-sweep"
command = [{json.dumps(sys.executable)}, "train.py", "--x", "{{x}}"]
max_running = 2
[resources]
gpus = 1
[parameters]
x = [0.1, 0.2, 0.9, 1.0]
[metric]
name = "val_loss"
goal = "minimize"
[early_stop]
rule = "median"
min_steps = 5
min_trials = 2
"""
    )
    said = server.cli("sweep", "sweep.toml", cwd=work).stdout
    assert said.startswith("sweep ") and "4 trials queued, at most 2 at once" in said, said
    sweep_id = int(said.split()[1])
    client = server.client()

    def ended() -> dict | None:  # type: ignore[type-arg]
        found = client.sweep(sweep_id)
        return found if set(found["states"]) <= TERMINAL else None

    sweep = wait_for(ended, timeout_s=120, interval_s=0.5)
    trials = sweep["trials"]
    assert [t["params"]["x"] for t in trials] == [0.1, 0.2, 0.9, 1.0]  # ranked by best loss
    for best in trials[:2]:
        assert (best["state"], best["step"], best["reason"]) == ("COMPLETED", STEPS, None), best
        assert best["best"] == pytest.approx(best["params"]["x"] + 1 / STEPS, abs=0.02)
    for worst in trials[2:]:
        assert worst["state"] == "CANCELLED", worst
        assert worst["reason"].startswith("EarlyStopped: val_loss "), worst
        assert "worse than the median" in worst["reason"], worst
        assert 5 <= worst["step"] < STEPS, worst
    assert sweep["states"] == {"COMPLETED": 2, "CANCELLED": 2}
    # The trial's job got its parameter as an argument too (the command's {x}).
    job = client.job(trials[0]["job_id"])
    assert job["command"][-2:] == ["--x", "0.1"] and job["array_job_id"] == sweep_id

    shown = server.cli("sweep", "show", str(sweep_id)).stdout.splitlines()
    assert shown[0].startswith(f"sweep {sweep_id} x-sweep (")
    header = shown[2].split()
    assert header == ["RANK", "TRIAL", "PARAMS", "BEST", "LAST", "STEP", "STATE", "REASON"]
    rows = [line.split() for line in shown[3:]]
    assert [r[:3] for r in rows[:2]] == [["1", f"{sweep_id}_0", "x=0.1"],
                                         ["2", f"{sweep_id}_1", "x=0.2"]]  # fmt: skip
    assert all("EarlyStopped:" in line for line in shown[5:7])
    listed = server.cli("sweep", "list").stdout
    row = next(line for line in listed.splitlines() if line.split()[0] == str(sweep_id))
    assert row.split()[1] == "x-sweep" and row.split()[3] == "4"
    assert "2 CANCELLED 2 COMPLETED" in row and "val_loss (minimize)" in row
    as_json = json.loads(server.cli("sweep", "show", str(sweep_id), "--json").stdout)
    assert as_json["trials"] == trials


def test_sweep_commands_say_what_is_wrong_in_one_line(
    server: ServerProcess, tmp_path: Path
) -> None:
    missing = server.cli("sweep", "show", "424242", check=False)
    assert missing.returncode == 1
    assert missing.stderr == "gpuyard: sweep 424242 not found: `gpuyard sweep list` lists yours\n"
    absent = server.cli("sweep", str(tmp_path / "none.toml"), check=False)
    assert absent.returncode == 1 and absent.stderr.startswith("gpuyard: cannot read the sweep")
    assert server.cli("sweep", "list").stdout == "no sweeps: `gpuyard sweep FILE` runs one\n"


def test_the_sweeps_cap_holds_and_cancel_of_its_id_cancels_every_trial(
    server: ServerProcess, tmp_path: Path
) -> None:
    (tmp_path / "sweep.toml").write_text(
        'command = ["sleep", "{secs}"]\nmax_running = 1\n[resources]\ngpus = 1\n'
        "[parameters]\nsecs = [60, 61, 62]\n"
    )
    said = server.cli("sweep", "sweep.toml", cwd=tmp_path).stdout
    sweep_id = int(said.split()[1])
    client = server.client()

    def one_running() -> dict | None:  # type: ignore[type-arg]
        found = client.sweep(sweep_id)
        return found if found["states"].get("RUNNING") else None

    # Two GPUs free, but at most one trial at a time: the others wait for the array's cap.
    sweep = wait_for(one_running, timeout_s=30)
    pending = [t["job_id"] for t in sweep["trials"] if t["state"] == "PENDING"]
    assert len(pending) == 2, sweep

    def capped() -> bool:
        return all(client.job(j)["reason"] == "JobArrayTaskLimit" for j in pending)

    wait_for(capped, timeout_s=30)
    assert client.sweep(sweep_id)["states"] == {"RUNNING": 1, "PENDING": 2}
    server.cli("cancel", str(sweep_id))

    def all_cancelled() -> dict | None:  # type: ignore[type-arg]
        found = client.sweep(sweep_id)
        return found if found["states"] == {"CANCELLED": 3} else None

    sweep = wait_for(all_cancelled, timeout_s=30)
    assert {t["reason"] for t in sweep["trials"]} == {"Cancelled by user"}


REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(1200)  # six CPU training runs, two at once: minutes on a loaded machine
def test_the_example_sweep_runs_as_is_on_a_small_machine_without_gpus(tmp_path: Path) -> None:
    """The README's `gpuyard sweep examples/sweep.toml`, from the clone's root, on a server
    with no GPUs and two CPUs: every trial runs its training (none fails), and `sweep show`
    ranks them by the loss they reported."""
    if not (REPO / ".venv" / "bin" / "python").exists():
        pytest.skip("examples/sweep.toml runs .venv/bin/python, which `make run` makes")
    server = ServerProcess(tmp_path / "state", "--gpus", "0", "--cpus", "2", "--kill-grace", "1")
    server.start(timeout_s=120)
    try:
        said = server.cli("sweep", "examples/sweep.toml", cwd=REPO).stdout
        assert "6 trials queued, at most 2 at once" in said, said
        sweep_id = int(said.split()[1])
        client = server.client()
        ended = lambda: set(client.sweep(sweep_id)["states"]) <= TERMINAL  # noqa: E731
        wait_for(ended, timeout_s=1100, interval_s=0.5)  # pytest's timeout is the deadline
        sweep = client.sweep(sweep_id)
        assert set(sweep["states"]) <= {"COMPLETED", "CANCELLED"}, sweep["trials"]
        assert sweep["states"].get("COMPLETED", 0) >= 2, sweep["trials"]
        for trial in sweep["trials"]:
            assert trial["best"] is not None, trial  # each reported its loss
            if trial["state"] == "CANCELLED":
                assert trial["reason"].startswith("EarlyStopped: loss "), trial
        shown = server.cli("sweep", "show", str(sweep_id)).stdout
        assert "metric: loss (minimize)" in shown and "\n1 " in shown, shown
    finally:
        server.stop()
        server.kill_jobs()


def test_a_sweep_whose_program_is_not_there_is_refused_at_submit(
    server: ServerProcess, tmp_path: Path
) -> None:
    """As `submit` checks its program: the old example's `python3 train.py` from a folder
    without train.py is one line naming the file's line, and nothing is queued (it used to
    queue 8 trials that each failed after their wait)."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "sweep.toml").write_text(
        'name = "s"\ncommand = "python3 train.py --lr {lr}"\n[parameters]\nlr = [0.1, 0.2]\n'
    )
    refused = server.cli("sweep", "sweep.toml", cwd=work, check=False)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
    assert refused.stderr.startswith(
        f"gpuyard: sweep.toml, line 2: command: train.py: no such file in {work}"
    ), refused.stderr
    (work / "sweep.toml").write_text(
        'name = "s"\ncommand = "./nothing-here --lr {lr}"\n[parameters]\nlr = [0.1]\n'
    )
    absent = server.cli("sweep", "sweep.toml", cwd=work, check=False)
    assert absent.returncode == 1 and "command: ./nothing-here: no such file" in absent.stderr
    assert server.client().jobs(all=True) == []
