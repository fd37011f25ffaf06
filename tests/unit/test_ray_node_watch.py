"""The Ray backend's node bookkeeping without a cluster: inventory naming and numbering, the
local-node spec, and NodeWatch's lost/back decisions over a sequence of Ray node tables."""

from __future__ import annotations

import pytest

from gpuyard.adapters.ray.backend import NodeWatch, inventory, parse_local_nodes
from gpuyard.adapters.ray.cluster import LocalNodeSpec, RayNode
from gpuyard.domain.errors import InvalidRequest


def _node(node_id: str, name: str, gpus: int = 2, alive: bool = True) -> RayNode:
    return RayNode(node_id, name, "host", "10.0.0.1", gpus, 8, 32768, alive)


class _Table:
    """What `RayConnection.nodes()` answers, changed by the test between polls."""

    def __init__(self, nodes: list[RayNode]) -> None:
        self.now = nodes

    def nodes(self) -> list[RayNode]:
        return self.now


def test_inventory_numbers_gpus_across_nodes_and_skips_dead_and_gpu_less_ones() -> None:
    found = [_node("a", "head", 0), _node("b", "w1"), _node("c", "w2", alive=False),
             _node("d", "w1", 4)]  # fmt: skip
    inv = inventory(found, gpu_mem_mib=81920)
    assert [n.name for n in inv.nodes] == ["w1", "w1#1"]  # repeated names made unique
    assert [(g.index, g.node) for g in inv.gpus] == [
        (0, "w1"), (1, "w1"), (2, "w1#1"), (3, "w1#1"), (4, "w1#1"), (5, "w1#1")
    ]  # fmt: skip
    assert all(g.memory_total_mib == 81920 and not g.detected for g in inv.gpus)


def test_local_node_spec_and_its_one_line_error() -> None:
    assert parse_local_nodes("2x2") == [LocalNodeSpec(gpus=2, cpus=2)] * 2
    assert parse_local_nodes("3x1x4") == [LocalNodeSpec(gpus=1, cpus=4)] * 3
    assert parse_local_nodes(None) == [LocalNodeSpec()]
    with pytest.raises(InvalidRequest, match="use NxG or NxGxC"):
        parse_local_nodes("two")


def test_a_lost_node_is_reported_once_and_back_when_a_node_of_its_name_returns() -> None:
    first = [_node("a", "n0"), _node("b", "n1")]
    table = _Table(first)
    watch = NodeWatch(table, first)  # type: ignore[arg-type]
    events: list[tuple[str, str]] = []
    watch.on_lost = lambda name: events.append(("lost", name))
    watch.on_back = lambda name: events.append(("back", name))
    assert watch.node_ids() == {"n0": "a", "n1": "b"}

    table.now = [_node("a", "n0"), _node("b", "n1", alive=False)]
    watch.poll()
    watch.poll()
    assert events == [("lost", "n1")] and watch.node_ids() == {"n0": "a"}

    table.now = [_node("a", "n0"), _node("b", "n1", alive=False), _node("c", "n1")]
    watch.poll()
    assert events == [("lost", "n1"), ("back", "n1")]
    assert watch.node_ids() == {"n0": "a", "n1": "c"}  # the new id: launches go there


def test_machines_of_the_same_ray_name_are_followed_by_id_not_by_position() -> None:
    first = [_node("a", "10.0.0.5"), _node("b", "10.0.0.5")]  # two raylets, Ray's default name
    table = _Table(first)
    watch = NodeWatch(table, first)  # type: ignore[arg-type]
    lost: list[str] = []
    watch.on_lost = lost.append
    table.now = [_node("a", "10.0.0.5", alive=False), _node("b", "10.0.0.5")]
    watch.poll()
    assert lost == ["10.0.0.5"]  # a's machine, not b's
    assert watch.node_ids() == {"10.0.0.5#1": "b"}
