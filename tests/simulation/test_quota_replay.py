"""The quota gate in the simulator: a known answer, and the same decisions as the live server's
gate (LiveRig) on a contended trace of three users, two of them in one team."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gpuyard.domain.errors import InvalidRequest
from gpuyard.scheduling.cluster import ClusterState, NodeSpec
from gpuyard.scheduling.policies import make_policy
from gpuyard.scheduling.quotas import Limits, QuotaRules
from gpuyard.simulation.engine import Replay
from gpuyard.simulation.replay import _per_user_quota
from gpuyard.simulation.trace import TraceJob
from tests.services.live_harness import LiveRig, Recording
from tests.services.test_live_scheduling import LIVE_POLICIES, contended_trace, live_events

RULES = QuotaRules(
    users={"a": Limits(max_gpus=4), "c": Limits(max_gpus=3)},
    teams={"x": Limits(max_gpus=6)},
    team_of={"a": "x", "b": "x"},
)


def test_a_user_limit_delays_the_job_over_it() -> None:
    trace = [TraceJob(i, "a", 0.0, 1, 100.0) for i in (1, 2, 3)] + [TraceJob(4, "b", 0.0, 1, 50.0)]
    rules = QuotaRules(users={"a": Limits(max_gpus=2)})
    done = Replay(trace, make_policy("fifo"), ClusterState.uniform(4, 4), quotas=rules).run()
    ends = {o.id: o.finished_at for o in done.jobs}
    assert ends == {1: 100.0, 2: 100.0, 3: 200.0, 4: 50.0}  # one GPU stayed free for job 3
    free = Replay(trace, make_policy("fifo"), ClusterState.uniform(4, 4)).run()
    assert {o.id: o.finished_at for o in free.jobs}[3] == 100.0


def test_a_trace_job_larger_than_the_limit_is_refused() -> None:
    with pytest.raises(InvalidRequest, match="1 jobs of the trace ask more than 2 GPUs"):
        _per_user_quota([TraceJob(1, "a", 0.0, 4, 1.0), TraceJob(2, "a", 0.0, 2, 1.0)], 2)


def _capped(seed: int) -> list[TraceJob]:
    return [dataclasses.replace(t, gpus=min(t.gpus, 3)) for t in contended_trace(seed)]


@pytest.mark.parametrize("policy", LIVE_POLICIES)
def test_live_gate_and_simulated_gate_decide_alike(
    tmp_path: Path, policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = _capped(seed=11)
    recorder = Recording(make_policy(policy))
    cluster = ClusterState([NodeSpec("node0", 8)])
    Replay(trace, recorder, cluster, restart_penalty_s=0.0, quotas=RULES).run()
    simulated = recorder.events
    assert any(kind == "cancel" for kind, _, _ in simulated), "the trace must hit a limit"
    original = LiveRig.__init__

    def with_rules(self: LiveRig, *args: object, **kwargs: object) -> None:
        original(self, *args, **kwargs)  # type: ignore[arg-type]
        self.scheduler.set_quotas(RULES)

    monkeypatch.setattr(LiveRig, "__init__", with_rules)
    assert live_events(tmp_path, trace, policy, gpus=8) == simulated
