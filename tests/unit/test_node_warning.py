"""`--signal SIG@SECONDS` on a Ray node: the node's supervisor (node mode, the same code as a
local job's) sends the warning once before the time limit, then the stop signal at the limit.
`NodeRunner` is used directly, without Ray: real processes."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.unit.test_node_supervisor import _run

from gpuyard.adapters.ray.node import NodeRunner


def test_a_node_gets_the_warning_signal_before_its_time_limit(tmp_path: Path) -> None:
    runner = NodeRunner()
    script = (
        "trap 'echo warned' USR1; trap 'echo stopped; exit 0' TERM; while :; do sleep 0.1; done"
    )
    runner.start(
        ["sh", "-c", script], {}, 0.5, str(tmp_path), time_limit_s=3,
        warn=(signal.SIGUSR1, 2),
    )  # fmt: skip
    lines, code, cause = _run(runner)
    assert (code, cause) == (0, "timeout")
    # Once, then the stop at the limit (each `sleep` the signals reached says so too).
    said = [line for line in lines if line in (b"warned", b"stopped")]
    assert said == [b"warned", b"stopped"]
    assert any(b"sending warning signal 10" in line for line in lines)
