"""`--signal SIG@SECONDS` on the Ray backend: each node's supervisor sends the warning before
the gang's time limit, then the stop signal at the limit (a real two-node local Ray cluster)."""

from __future__ import annotations

import signal
import sys
import uuid
from pathlib import Path

from gpuyard.adapters.ray import GangOutcome, RayConnection, launch
from tests.raycluster.test_ray_gang import assert_clean, node_ids

# Says each signal it gets; the stop signal (TERM) ends it.
WARNED = """
import signal, sys, time
signal.signal(signal.SIGUSR1, lambda *_: print("warned", flush=True))
signal.signal(signal.SIGTERM, lambda *_: (print("stopped", flush=True), sys.exit(0)))
print("ready", flush=True)
while True:
    time.sleep(0.1)
"""


def test_every_node_is_warned_before_the_time_limit(ray_cluster: RayConnection, tmp_path: Path):
    marker = f"gpuyard-test-{uuid.uuid4().hex[:12]}"
    log = tmp_path / "output.log"
    handle = launch(
        5, [(node, 1, 1) for node in node_ids(ray_cluster)],
        lambda r, a, p: [sys.executable, "-c", WARNED, marker], {}, log, grace_s=2,
        time_limit_s=4.0, warn=(signal.SIGUSR1, 2),
    )  # fmt: skip
    result = handle.wait(40)
    assert result is not None and result.outcome is GangOutcome.TIMED_OUT
    text = log.read_text()
    for rank in (0, 1):
        said = [
            line.split("] ", 1)[1] for line in text.splitlines()
            if line.startswith(f"[node{rank}]") and line.endswith(("warned", "stopped"))
        ]  # fmt: skip
        assert said == ["warned", "stopped"], text
    assert_clean(marker, handle.placement_group_id)
