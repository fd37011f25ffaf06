"""The cluster model shared by the live server and the simulator: nodes of GPUs and placement.

Worked example. Three nodes of 8 GPUs with 8, 3 and 5 GPUs free. A 2-GPU job goes to the node
with 3 free (best fit: it leaves the larger holes for larger jobs); a 4-GPU job to the node with
5 free; a 16-GPU job needs two whole free nodes (gang: all its GPUs at once) and so cannot start
here: only one node is entirely free.

CPU cores and memory are accounted per node when a node declares them (the live server's
machine does; simulated Philly nodes do not): a job of up to one node goes only where its CPUs
and memory fit too. Gang jobs are placed by GPUs alone.
"""

from __future__ import annotations

from dataclasses import dataclass

Placement = tuple[tuple[int, int], ...]  # ((node index, GPUs on it), ...)


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One machine as the scheduler sees it."""

    name: str
    gpus: int
    cpus: int | None = None  # None: not accounted
    mem_mib: int | None = None


class ClusterState:
    """Free GPUs per node, with nodes bucketed by free count so best fit is O(GPUs per node)."""

    def __init__(self, nodes: list[NodeSpec]) -> None:
        self.nodes = nodes
        self.node_gpus = max((n.gpus for n in nodes), default=0)
        self.free = [n.gpus for n in nodes]
        self.total_gpus = sum(self.free)
        self.free_gpus = self.total_gpus
        self._buckets: list[set[int]] = [set() for _ in range(self.node_gpus + 1)]
        for i, n in enumerate(nodes):
            self._buckets[n.gpus].add(i)
        inf = float("inf")
        self.free_cpus = [inf if n.cpus is None else float(n.cpus) for n in nodes]
        self.free_mem_mib = [inf if n.mem_mib is None else float(n.mem_mib) for n in nodes]

    @classmethod
    def uniform(cls, total_gpus: int, gpus_per_node: int) -> ClusterState:
        count, rest = divmod(total_gpus, gpus_per_node)
        nodes = [NodeSpec(f"node{i}", gpus_per_node) for i in range(count)]
        if rest:
            nodes.append(NodeSpec(f"node{count}", rest))
        return cls(nodes)

    def can_ever_fit(self, gpus: int) -> bool:
        """Whether the job could run on this cluster at all (with everything free)."""
        if gpus <= self.node_gpus:
            return True
        full = sum(1 for n in self.nodes if n.gpus == self.node_gpus)
        return self.node_gpus > 0 and -(-gpus // self.node_gpus) <= full

    def would_fit(self, free: list[int], gpus: int) -> bool:
        """Whether `gpus` could be placed if the nodes had `free` GPUs (what-if planning, same
        rules as `place`)."""
        size = self.node_gpus
        if gpus <= size:
            return any(f >= gpus for f in free)
        whole = sum(1 for i, f in enumerate(free) if f == size and self.nodes[i].gpus == size)
        return whole >= -(-gpus // size)

    def place(self, gpus: int, cpus: int = 0, mem_mib: int = 0) -> Placement | None:
        """Where a job would go now, or None. Does not allocate. A job that asks for CPUs or
        memory is always given a node, even without GPUs, so they can be charged there."""
        if gpus > self.free_gpus:
            return None
        if gpus == 0 and not (cpus or mem_mib):
            return ()
        if gpus <= self.node_gpus:
            for free in range(gpus, self.node_gpus + 1):
                bucket = self._buckets[free]
                if not bucket:
                    continue
                if not (cpus or mem_mib):
                    return ((min(bucket), gpus),)
                for node in sorted(bucket):
                    if self.free_cpus[node] >= cpus and self.free_mem_mib[node] >= mem_mib:
                        return ((node, gpus),)
            return None
        need = -(-gpus // self.node_gpus)
        whole = self._buckets[self.node_gpus]
        if len(whole) < need:
            return None
        return tuple((i, self.node_gpus) for i in sorted(whole)[:need])

    def allocate(self, placement: Placement, cpus: int = 0, mem_mib: int = 0) -> None:
        for node, gpus in placement:
            self._move(node, self.free[node] - gpus)
        self._charge(placement, -cpus, -mem_mib)

    def release(self, placement: Placement, cpus: int = 0, mem_mib: int = 0) -> None:
        for node, gpus in placement:
            self._move(node, self.free[node] + gpus)
        self._charge(placement, cpus, mem_mib)

    def _charge(self, placement: Placement, cpus: int, mem_mib: int) -> None:
        """CPUs and memory are charged to the job's first node."""
        if placement and (cpus or mem_mib):
            node = placement[0][0]
            self.free_cpus[node] += cpus
            self.free_mem_mib[node] += mem_mib
            if self.free_cpus[node] < 0 or self.free_mem_mib[node] < 0:
                raise ValueError(f"node {node} would have negative free CPUs or memory")

    def _move(self, node: int, new_free: int) -> None:
        if not 0 <= new_free <= self.nodes[node].gpus:
            raise ValueError(f"node {node} would have {new_free} free GPUs")
        self._buckets[self.free[node]].discard(node)
        self.free_gpus += new_free - self.free[node]
        self.free[node] = new_free
        self._buckets[new_free].add(node)
