"""`ClusterState.place` remembers what failed until room comes back (a pass over a deep queue on a
cluster with free GPUs but no free CPU must not search the nodes for every job). The memory
must never turn a job away that fits: after any sequence of allocations and releases, `place`
finds a node exactly when one has the GPUs, CPUs and memory asked for."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuyard.scheduling.cluster import ClusterState, NodeSpec

ASK = st.tuples(st.integers(0, 4), st.integers(0, 6), st.sampled_from([0, 1024, 4096]))
STEP = st.tuples(st.sampled_from(["take", "give back"]), ASK)


def _fits_somewhere(cluster: ClusterState, gpus: int, cpus: int, mem_mib: int) -> bool:
    return any(
        cluster.free[n] >= gpus
        and cluster.free_cpus[n] >= cpus
        and cluster.free_mem_mib[n] >= mem_mib
        for n in range(len(cluster.nodes))
    )


@settings(max_examples=200, deadline=None)
@given(st.lists(STEP, max_size=30), st.lists(ASK, min_size=1, max_size=8))
def test_place_finds_a_node_exactly_when_one_has_room(steps, asks) -> None:  # type: ignore[no-untyped-def]
    cluster = ClusterState([NodeSpec(f"n{i}", 4, cpus=6, mem_mib=8192) for i in range(3)])
    held = []
    for kind, (gpus, cpus, mem_mib) in steps:
        for ask in asks:  # asked between every change, so failures are remembered
            assert (cluster.place(*ask) is not None) == _fits_somewhere(cluster, *ask)
        if kind == "take":
            placement = cluster.place(gpus, cpus, mem_mib)
            if placement:
                cluster.allocate(placement, cpus, mem_mib)
                held.append((placement, cpus, mem_mib))
        elif held:
            cluster.release(*held.pop(0))
    for ask in asks:
        assert (cluster.place(*ask) is not None) == _fits_somewhere(cluster, *ask)
