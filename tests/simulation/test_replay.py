"""Replay and `gpuyard simulate`: the fifo model check, simulator invariants, metrics, the CLI.

The Philly trace is kept in the repository (`tests/data/traces`, with its attribution), so the
model check runs on every clone; were it missing, its tests skip, saying so, and fail when `CI`
is set: there the model check must run (a skip would let it pass without ever checking).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import pytest

from gpuyard.domain.errors import InvalidRequest
from gpuyard.scheduling.cluster import ClusterState
from gpuyard.scheduling.policies import ORACLES, make_policy, policy_names
from gpuyard.scheduling.policy import Context, Policy, SchedJob
from gpuyard.simulation.engine import Replay, ReplayResult
from gpuyard.simulation.metrics import jain_index, percentile
from gpuyard.simulation.replay import simulate
from gpuyard.simulation.trace import TraceJob, load_trace
from tests.needs import missing

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"  # vendored: see its README
PHILLY = TRACES / "philly_14237.csv"


def require_philly(path: Path = PHILLY) -> None:
    """Skip without the trace, except under CI, where its absence is a failure."""
    if path.exists():
        return
    missing(
        f"Philly trace not found at {path} (tests/data/traces)",
        "the model check",
        "provide the traces",
    )


@pytest.fixture
def philly_present() -> None:
    require_philly()


needs_philly = pytest.mark.usefixtures("philly_present")
GPUYARD = str(Path(sys.executable).parent / "gpuyard")
HOUR = 3600.0
PENALTY_S = 60.0
REPORT_FIELDS = {"policy", "jobs", "avg_jct_s", "p50_jct_s", "p95_jct_s", "p99_jct_s",
                 "avg_queue_s", "p99_queue_s", "avg_slowdown", "makespan_s", "utilization",
                 "preemptions", "fairness", "time_limits", "preemptible", "timeouts"}  # fmt: skip
HEADER = "job_id,user,submit_time_s,num_gpus,duration_s\n"


@pytest.fixture(scope="module")
def philly() -> list[TraceJob]:
    require_philly()
    return load_trace(PHILLY)


def test_a_missing_trace_fails_under_ci_and_skips_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "philly_14237.csv"
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match="CI is set"):
        require_philly(missing)
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception):
        require_philly(missing)


class Audit:
    """A transparent policy wrapper that records every run and checks every placement.

    It sees only what the Policy protocol gives, so the engine is audited from outside.
    """

    def __init__(self, inner: Policy, cluster: ClusterState) -> None:
        self.inner, self.cluster = inner, cluster
        self.name, self.preemptive = inner.name, inner.preemptive
        self.used = [0] * len(cluster.nodes)  # GPUs held per node, by our own count
        self.used_total = 0
        self.held_s: defaultdict[int, float] = defaultdict(float)  # run time per job
        self.allocated: dict[int, int] = {}  # GPUs each job holds while it runs
        self.runs: list[tuple[float, float, int]] = []  # (start, end, GPUs held)
        self._open: dict[int, tuple[float, tuple[tuple[int, int], ...]]] = {}

    def submit(self, job: SchedJob, now: float) -> None:
        self.inner.submit(job, now)

    def started(self, job: SchedJob, now: float) -> None:
        placement, per_node = job.placement, self.cluster.node_gpus
        assert len({n for n, _ in placement}) == len(placement)
        if job.gpus > per_node:  # gang: whole nodes only, the last one's spare GPUs included
            assert all(g == per_node == self.cluster.nodes[n].gpus for n, g in placement)
            assert len(placement) == -(-job.gpus // per_node), (job.id, placement)
        else:
            assert [g for _, g in placement] == ([job.gpus] if job.gpus else []), placement
        assert job.id not in self._open
        self._open[job.id] = (now, placement)
        self.allocated[job.id] = sum(g for _, g in placement)
        self._apply(placement, +1)
        self.inner.started(job, now)

    def preempted(self, job: SchedJob, now: float) -> None:
        self._close(job, now)
        self.inner.preempted(job, now)

    def finished(self, job: SchedJob, now: float) -> None:
        self._close(job, now)
        self.inner.finished(job, now)

    def schedule(self, ctx: Context) -> None:
        self.inner.schedule(ctx)
        assert self.cluster.total_gpus - self.cluster.free_gpus == self.used_total

    def next_decision_at(self, now: float) -> float | None:
        return self.inner.next_decision_at(now)

    def _close(self, job: SchedJob, now: float) -> None:
        start, placement = self._open.pop(job.id)
        self._apply(placement, -1)
        self.held_s[job.id] += now - start
        self.runs.append((start, now, self.allocated[job.id]))

    def _apply(self, placement: Sequence[tuple[int, int]], sign: int) -> None:
        for node, gpus in placement:
            self.used[node] += sign * gpus
            self.used_total += sign * gpus
            capacity = self.cluster.nodes[node].gpus
            assert 0 <= self.used[node] <= capacity, f"node {node} over-committed"
            assert self.cluster.free[node] == capacity - self.used[node]


def replay(
    trace: Sequence[TraceJob], name: str, gpus: int, audit: bool = False
) -> tuple[ReplayResult, Audit | None]:
    cluster = ClusterState.uniform(gpus, 8)
    policy: Policy = make_policy(name)
    audited = Audit(policy, cluster) if audit else None
    result = Replay(trace, audited or policy, cluster, restart_penalty_s=PENALTY_S,
                    expose_durations=name in ORACLES).run()  # fmt: skip
    if audited:
        assert not audited._open and cluster.free == [n.gpus for n in cluster.nodes]
        assert cluster.free_gpus == cluster.total_gpus
    return result, audited


def write_trace(path: Path, rows: Sequence[str], header: str = HEADER) -> Path:
    path.write_text(header + "".join(r + "\n" for r in rows))
    return path


def gpuyard(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([GPUYARD, *args], capture_output=True, text=True, timeout=120)


# -- the model check -------------------------------------------------------------------------
@needs_philly
@pytest.mark.parametrize(
    ("gpus", "avg_jct_h", "avg_queue_h"),
    [(1024, 26.97, 18.91), (1280, 10.67, 2.61), (2048, 8.06, 0.0)],
)
def test_fifo_reproduces_the_model_check(gpus: int, avg_jct_h: float, avg_queue_h: float) -> None:
    [report] = simulate(PHILLY, gpus, policies=["fifo"])
    assert report.jobs == 14237 and report.preemptions == 0
    assert report.avg_jct_s / HOUR == pytest.approx(avg_jct_h, rel=0.01)
    assert report.avg_queue_s / HOUR == pytest.approx(avg_queue_h, rel=0.01, abs=0.005)


# -- invariants on the real trace, for every policy ------------------------------------------
@pytest.mark.parametrize("name", policy_names())
def test_with_unlimited_gpus_the_average_jct_is_the_mean_duration(
    philly: list[TraceJob], name: str
) -> None:
    result, _ = replay(philly, name, 100_000)
    mean_duration = sum(j.duration_s for j in philly) / len(philly)
    assert mean_duration / HOUR == pytest.approx(8.06, abs=0.005)
    jcts = [o.finished_at - o.submitted_at for o in result.jobs]
    assert sum(jcts) / len(jcts) == pytest.approx(mean_duration, rel=1e-9)
    assert all(o.preemptions == 0 and o.first_started_at == o.submitted_at for o in result.jobs)


@pytest.mark.parametrize("name", policy_names())
def test_gpu_time_served_is_the_traces_plus_restart_penalties_and_replays_repeat(
    philly: list[TraceJob], name: str
) -> None:
    # The first 3,000 jobs on 384 GPUs: as crowded as the full trace on 1,024 (fifo queues
    # 6.5 h on average, las preempts thousands of times) at a fifth of the replay time.
    trace = philly[:3000]
    result, audit = replay(trace, name, 384, audit=True)
    assert audit is not None and len(result.jobs) == len(trace)
    by_id = {j.id: j for j in trace}
    need = served = bound = 0.0
    for o in result.jobs:
        job = by_id[o.id]
        assert (o.gpus, o.duration_s, o.user) == (job.gpus, job.duration_s, job.user)
        assert o.submitted_at == job.submitted_at
        assert o.submitted_at <= o.first_started_at <= o.finished_at - o.duration_s + 1e-6
        held = audit.held_s[o.id]
        assert o.duration_s - 1e-6 <= held <= o.duration_s + o.preemptions * PENALTY_S + 1e-6
        if o.preemptions == 0:
            assert o.finished_at - o.first_started_at == pytest.approx(o.duration_s, abs=1e-6)
        allocated = audit.allocated[o.id]  # > o.gpus for a gang job that leaves a node part-idle
        need += allocated * o.duration_s
        served += allocated * held
        bound += allocated * (o.duration_s + o.preemptions * PENALTY_S)
    assert sum(j.gpus * j.duration_s for j in trace) <= need
    assert need * (1 - 1e-12) <= served <= bound * (1 + 1e-12)
    assert len(audit.runs) == len(trace) + sum(o.preemptions for o in result.jobs)
    # The engine's in-window integral agrees with the runs it made.
    first, last = trace[0].submitted_at, trace[-1].submitted_at
    in_window = sum(g * max(0.0, min(e, last) - max(s, first)) for s, e, g in audit.runs)
    assert result.busy_gpu_s_in_window == pytest.approx(in_window, rel=1e-9)
    assert result.window_s == last - first
    assert 0 < result.busy_gpu_s_in_window <= result.total_gpus * result.window_s
    # Identical input, identical output (and the audit changed nothing).
    again, _ = replay(trace, name, 384)
    assert again.jobs == result.jobs and again.busy_gpu_s_in_window == result.busy_gpu_s_in_window


@pytest.mark.parametrize("name", policy_names())
def test_a_small_crowded_cluster_never_over_commits_a_node(name: str) -> None:
    sizes = [8, 4, 4, 2, 16, 1, 3, 8, 5, 1, 2, 16, 7, 1]
    trace = [TraceJob(i, f"u{i % 3}", float(i // 3), g, 30.0 + 17 * (i % 5))
             for i, g in enumerate(sizes)]  # fmt: skip
    result, _ = replay(trace, name, 20, audit=True)  # nodes of 8, 8 and 4
    assert sorted(o.id for o in result.jobs) == list(range(len(sizes)))


# -- metrics, with answers worked by hand ----------------------------------------------------
def test_fifo_metrics_on_a_trace_worked_by_hand(tmp_path: Path) -> None:
    # 16 GPUs in 2 nodes. A (4), B (8), C (2) start at 0 (C best-fits beside A); D (16) waits
    # for both nodes until A ends at 100; E (1 GPU) queues behind D: head-of-line blocking.
    trace = write_trace(tmp_path / "t.csv", ["0,a,0,4,100", "1,a,0,8,50", "2,a,0,2,10",
                                             "3,b,1,16,10", "4,c,2,1,5"])  # fmt: skip
    calls: list[tuple[str, int, int]] = []
    [r] = simulate(trace, 16, policies=["fifo"], progress=lambda *a: calls.append(a))
    assert calls == [("fifo", 0, 5), ("fifo", 5, 5)]
    # JCTs 100, 50, 10, 109 (D: 100-110), 113 (E: 110-115); queueing 0, 0, 0, 99, 108.
    assert r.jobs == 5 and r.avg_jct_s == pytest.approx(382 / 5)
    assert (r.p50_jct_s, r.p95_jct_s, r.p99_jct_s) == (100, 113, 113)  # nearest rank
    assert (r.avg_queue_s, r.p99_queue_s) == (pytest.approx(207 / 5), 108)
    assert r.makespan_s == 115
    # window = submissions 0..2 s, when 14 of 16 GPUs were busy.
    assert r.utilization == pytest.approx(14 / 16)
    # bounded slowdowns: 1, 1, 1, 109/60, 113/60 (durations under 60 s count as 60 s).
    d, e = 109 / 60, 113 / 60
    assert r.avg_slowdown == pytest.approx((3 + d + e) / 5)
    assert r.fairness == pytest.approx((1 + d + e) ** 2 / (3 * (1 + d**2 + e**2)))
    assert r.preemptions == 0 and r.policy == "fifo"


def test_percentile_and_jain_edges() -> None:
    assert percentile([], 99) == 0.0
    assert percentile([7.0], 50) == 7.0
    hundred = [float(v) for v in range(1, 101)]
    assert [percentile(hundred, p) for p in (1, 50, 95, 99, 100)] == [1, 50, 95, 99, 100]
    assert jain_index([2.0, 2.0, 2.0]) == 1.0
    assert jain_index([1.0, 0.0, 0.0]) == pytest.approx(1 / 3)


def test_simulate_refuses_bad_requests_before_replaying(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.csv", ["0,a,0,1,10", "1,a,5,16,10"])
    assert len(simulate(trace, 21)) == 1  # a partial last node is fine: 8 + 8 + 5
    cases = [
        (dict(gpus=0), "--gpus must be at least 1"),
        (dict(gpus=16, gpus_per_node=0), "--gpus-per-node must be at least 1"),
        (dict(gpus=16, policies=["nope"]), "unknown policy 'nope'"),
        (dict(gpus=16, policies=[]), "no policy"),
        (dict(gpus=16, restart_penalty_s=-1.0), "--restart-penalty"),
        (dict(gpus=12), "job 1 needs 16 GPUs"),  # 12 GPUs, but only one whole node of 8
    ]
    for kwargs, message in cases:
        with pytest.raises(InvalidRequest, match=message):
            simulate(trace, **kwargs)  # type: ignore[arg-type]
    for rows, message in [
        ([], "no jobs"),
        (["0,a,0,1,10", "0,b,1,1,10"], "job_id appears twice"),
        (["0,a,0,-1,10"], "num_gpus and duration_s must be >= 0"),
        (["0,a,0,1,nan"], "num_gpus and duration_s must be >= 0"),
    ]:
        with pytest.raises(InvalidRequest, match=message):
            simulate(write_trace(tmp_path / "bad.csv", rows), 16)


# -- the CLI, as a user runs it --------------------------------------------------------------
def test_cli_json_lines_and_table(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.csv", ["0,a,0,4,100", "1,b,0,8,50", "2,a,3,2,10",
                                             "3,c,4,8,600", "4,b,9,1,5"])  # fmt: skip
    out = gpuyard("simulate", "--trace", str(trace), "--gpus", "8", "--compare", "fifo", "--json")
    assert out.returncode == 0 and out.stderr == "", out.stderr
    [line] = out.stdout.splitlines()
    record = json.loads(line)
    assert set(record) == REPORT_FIELDS and record["policy"] == "fifo" and record["jobs"] == 5
    names = policy_names()
    out = gpuyard("simulate", "--trace", str(trace), "--gpus", "8", "--compare", ",".join(names))
    assert out.returncode == 0 and out.stderr == "", out.stderr
    header, *rows = out.stdout.splitlines()
    assert header.split()[:3] == ["POLICY", "JOBS", "JCT_AVG_H"] and header.split()[-1] == "JAIN"
    # The hand-made trace has no time limits: backfill is given exact ones, and says so.
    labels = [n + " (oracle)" if n in ORACLES else n for n in names]
    labels = [n + " (exact limits)" if n == "backfill" else n for n in labels]
    assert [row.split("  ")[0].strip() for row in rows] == labels
    assert all(
        row.split()[len(label.split())] == "5" for row, label in zip(rows, labels, strict=True)
    )


def test_cli_progress_goes_to_a_terminal_stderr_and_never_to_stdout(tmp_path: Path) -> None:
    import pty

    trace = write_trace(tmp_path / "t.csv", ["0,a,0,4,100", "1,b,0,8,50"])
    args = ["simulate", "--trace", str(trace), "--gpus", "8", "--policy", "fifo"]
    plain = gpuyard(*args)
    master, slave = pty.openpty()
    try:
        tty = subprocess.run([GPUYARD, *args], stdout=subprocess.PIPE, stderr=slave, text=True,
                             timeout=120, env={**os.environ, "TERM": "xterm"})  # fmt: skip
        os.set_blocking(master, False)
        shown = os.read(master, 1 << 16)
    finally:
        os.close(slave)
        os.close(master)
    assert tty.returncode == 0 and tty.stdout == plain.stdout
    assert b"fifo" in shown and b"\x1b[" in shown  # the bar, drawn on the terminal
    assert plain.stdout.splitlines()[1].split()[:2] == ["fifo", "2"]


@pytest.mark.parametrize(
    ("rows", "header", "message"),
    [
        (["0,a,0,1"], "job_id,user,submit_time_s,num_gpus\n", "missing column(s) duration_s"),
        (["0,a,0,1,10", "1,a,zero,1,10"], HEADER, "trace line 3: a number is malformed"),
        (["0,a,0,1,10", "7,a,5,16,10"], HEADER, "job 7 needs 16 GPUs: more than the simulated"),
    ],
    ids=["missing-column", "bad-number", "job-larger-than-cluster"],
)
def test_cli_bad_traces_give_one_line_and_exit_1(
    tmp_path: Path, rows: list[str], header: str, message: str
) -> None:
    trace = write_trace(tmp_path / "t.csv", rows, header)
    out = gpuyard("simulate", "--trace", str(trace), "--gpus", "8", "--compare", "fifo")
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.startswith("gpuyard: ") and out.stderr.count("\n") == 1
    assert message in out.stderr, out.stderr


def test_cli_refuses_policy_and_compare_together(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.csv", ["0,a,0,1,10"])
    out = gpuyard("simulate", "--trace", str(trace), "--gpus", "8", "--policy", "fifo",
                  "--compare", "fifo")  # fmt: skip
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr == "gpuyard: give --policy NAME or --compare P1,P2,..., not both\n"
