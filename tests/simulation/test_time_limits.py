"""`gpuyard simulate --time-limits none|trace|padded`: the simulator replays time limits and
kills a job at its limit, as the live server does (issue 25, part 3)."""

from __future__ import annotations

import json
from pathlib import Path

from gpuyard.scheduling.cluster import ClusterState
from gpuyard.scheduling.policies import make_policy
from gpuyard.simulation.engine import Replay
from gpuyard.simulation.replay import simulate
from gpuyard.simulation.time_limits import LIMIT_BUCKETS_H, padded_limit_s, padding_factor
from gpuyard.simulation.trace import load_trace
from tests.simulation.test_replay import gpuyard, write_trace

_H = 3600.0


def test_a_padded_limit_is_the_same_every_time_and_a_round_bucket_above_the_duration() -> None:
    durations = [30.0, 1800.0, 3 * _H, 11 * _H, 40 * _H, 100 * _H]
    limits = [padded_limit_s(job_id, d) for job_id in range(200) for d in durations]
    again = [padded_limit_s(job_id, d) for job_id in range(200) for d in durations]
    assert limits == again
    assert {lim / _H for lim in limits} <= set(LIMIT_BUCKETS_H)
    pairs = zip(limits, [d for _ in range(200) for d in durations], strict=True)
    assert all(lim >= d for lim, d in pairs)
    factors = [padding_factor(job_id) for job_id in range(1000)]
    assert all(1.0 <= f < 3.0 for f in factors)
    assert min(factors) < 1.1 and max(factors) > 2.9  # spread over 1-3, not one value
    # a 30-min job asks 1 h when padded under 2x, else 4 h: both happen
    assert {padded_limit_s(job_id, 1800.0) / _H for job_id in range(50)} == {1, 4}


def test_a_job_longer_than_a_week_gets_a_week() -> None:
    assert padded_limit_s(1, 200 * _H) == 168 * _H


def test_padded_limits_kill_a_job_at_its_limit_and_none_does_not(tmp_path: Path) -> None:
    # job 0 needs 200 h: under padded limits it gets a week and is killed there
    path = write_trace(tmp_path / "t.csv", [f"0,a,0,1,{200 * _H:.0f}", "1,b,0,1,600"])
    out = gpuyard("simulate", "--trace", str(path), "--gpus", "8", "--policy", "fifo",
                  "--time-limits", "padded", "--json")  # fmt: skip
    assert out.returncode == 0, out.stderr
    padded = json.loads(out.stdout)
    assert padded["time_limits"] == "padded" and padded["timeouts"] == 1
    # JCTs 168 h and 600 s: the killed job's JCT ends at its limit
    assert abs(padded["avg_jct_s"] - (168 * _H + 600) / 2) < 1e-6
    (none,) = simulate(path, 8, policies=["fifo"], time_limits="none")
    assert none.timeouts == 0 and abs(none.avg_jct_s - (200 * _H + 600) / 2) < 1e-6
    table = gpuyard("simulate", "--trace", str(path), "--gpus", "8", "--policy", "fifo",
                    "--time-limits", "padded")  # fmt: skip
    assert "fifo (padded limits, 1 timeouts)" in table.stdout


def test_the_trace_column_is_used_by_default_and_kills_a_job_past_it(tmp_path: Path) -> None:
    header = "job_id,user,submit_time_s,num_gpus,duration_s,time_limit_s\n"
    path = write_trace(tmp_path / "t.csv", ["0,a,0,1,7200,3600", "1,a,0,1,600,"], header=header)
    (by_default,) = simulate(path, 8, policies=["fifo"])
    assert by_default.time_limits == "trace" and by_default.timeouts == 1
    assert abs(by_default.avg_jct_s - (3600 + 600) / 2) < 1e-6
    (ignored,) = simulate(path, 8, policies=["fifo"], time_limits="none")
    assert ignored.timeouts == 0 and ignored.time_limits == "none"


def test_a_timed_out_job_fails_its_afterok_dependant(tmp_path: Path) -> None:
    header = "job_id,user,submit_time_s,num_gpus,duration_s,time_limit_s,dependency\n"
    rows = ["10,a,0,1,7200,3600,", "11,a,1,1,60,,afterok:10"]
    path = write_trace(tmp_path / "t.csv", rows, header=header)
    (report,) = simulate(path, 8, policies=["fifo"])
    assert report.jobs == 1 and report.timeouts == 1  # job 1 never runs: its dependency failed


def test_an_unknown_mode_is_one_clear_line(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.csv", ["0,a,0,1,60"])
    out = gpuyard("simulate", "--trace", str(path), "--gpus", "8", "--time-limits", "exact")
    assert out.returncode != 0
    assert "--time-limits must be one of none, trace, padded" in out.stderr
    assert "Traceback" not in out.stderr


def test_the_replay_predicts_each_job_as_show_would(tmp_path: Path) -> None:
    header = "job_id,user,submit_time_s,num_gpus,duration_s,time_limit_s\n"
    rows = [f"{n},a,{4000 * n},1,3600," for n in range(1, 5)] + ["5,a,20000,1,1000,1800"]
    trace = load_trace(write_trace(tmp_path / "t.csv", rows, header=header))
    replay = Replay(trace, make_policy("fifo"), ClusterState.uniform(8, 8))
    jobs = {j.id: j for j in replay.run().jobs}
    assert [jobs[n].predicted_s for n in (1, 2, 3)] == [None, None, None]  # under 3 runs yet
    assert jobs[4].predicted_s == 3600  # its user's last 3 runs of 1 GPU took an hour
    assert jobs[5].predicted_s == 1800  # ... but at most its limit
