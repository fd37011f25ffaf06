"""`gpuyard simulate --preemptible-fraction F`: the figures of a server where only some jobs opt
in to preemption (issue 15), beside those of the published traces (every job preemptible)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from gpuyard.domain.errors import InvalidRequest
from gpuyard.simulation.replay import simulate
from gpuyard.simulation.trace import load_trace, with_preemptible_fraction
from tests.simulation.test_replay import gpuyard, write_trace


def _contended(path: Path, jobs: int = 300) -> Path:
    """Long and short jobs of three users on a small cluster: preemptive policies preempt."""
    rng = random.Random(11)
    rows, t = [], 0
    for job_id in range(jobs):
        t += rng.choice([0, 10, 60, 600])
        duration = rng.randint(20_000, 80_000) if rng.random() < 0.3 else rng.randint(30, 900)
        rows.append(f"{job_id},{rng.choice('abc')},{t},{rng.choice([1, 1, 2, 4, 8])},{duration}")
    return write_trace(path, rows)


def test_the_chosen_jobs_depend_on_the_id_alone_and_grow_with_the_fraction(tmp_path: Path):
    trace = load_trace(_contended(tmp_path / "t.csv"))
    chosen = {
        f: {t.id for t in with_preemptible_fraction(trace, f) if t.preemptible}
        for f in (0.0, 0.25, 0.5, 1.0)
    }
    assert chosen[0.0] == set() and chosen[1.0] == {t.id for t in trace}
    assert chosen[0.25] <= chosen[0.5] <= chosen[1.0]
    assert 0.4 < len(chosen[0.5]) / len(trace) < 0.6  # well mixed over sequential ids
    again = {t.id for t in with_preemptible_fraction(trace[::-1], 0.5) if t.preemptible}
    assert again == chosen[0.5]


def test_a_job_the_trace_keeps_from_preemption_stays_kept(tmp_path: Path):
    header = "job_id,user,submit_time_s,num_gpus,duration_s,no_preempt\n"
    path = write_trace(tmp_path / "t.csv", ["0,a,0,1,10,1", "1,a,0,1,10,"], header=header)
    kept = with_preemptible_fraction(load_trace(path), 1.0)
    assert [t.preemptible for t in kept] == [False, True]


@pytest.mark.parametrize("policy", ["las", "default"])
def test_the_fraction_bounds_the_preemptions_and_one_is_todays_figures(
    tmp_path: Path, policy: str
) -> None:
    path = _contended(tmp_path / "t.csv")
    (every,) = simulate(path, 16, policies=[policy])
    (all_of_them,) = simulate(path, 16, policies=[policy], preemptible_fraction=1.0)
    (half,) = simulate(path, 16, policies=[policy], preemptible_fraction=0.5)
    (none,) = simulate(path, 16, policies=[policy], preemptible_fraction=0.0)
    assert every == all_of_them and every.preemptible == 1.0
    assert every.preemptions > 0, "the trace must exercise preemption"
    assert none.preemptions == 0 and none.preemptible == 0.0
    assert 0.4 < half.preemptible < 0.6
    assert half.jobs == every.jobs == none.jobs


def test_cli_labels_the_rows_and_refuses_a_fraction_out_of_range(tmp_path: Path) -> None:
    path = str(_contended(tmp_path / "t.csv", jobs=40))
    out = gpuyard("simulate", "--trace", path, "--gpus", "16", "--compare", "fifo,las",
                  "--preemptible-fraction", "0.5")  # fmt: skip
    assert out.returncode == 0, out.stderr
    rows = out.stdout.splitlines()[1:]
    share = round(100 * simulate(Path(path), 16, policies=["fifo"],
                                 preemptible_fraction=0.5)[0].preemptible)  # fmt: skip
    assert [r.split("  ")[0] for r in rows] == [
        f"fifo ({share}% preemptible)",
        f"las ({share}% preemptible)",
    ]
    out = gpuyard("simulate", "--trace", path, "--gpus", "16", "--policy", "las", "--json",
                  "--preemptible-fraction", "0")  # fmt: skip
    assert json.loads(out.stdout)["preemptible"] == 0.0
    bad = gpuyard("simulate", "--trace", path, "--gpus", "16", "--preemptible-fraction", "1.5")
    assert bad.returncode != 0 and bad.stdout == ""
    assert bad.stderr.strip() == "gpuyard: --preemptible-fraction must be between 0 and 1, not 1.5"
    with pytest.raises(InvalidRequest, match="between 0 and 1"):
        simulate(Path(path), 16, preemptible_fraction=-0.1)
