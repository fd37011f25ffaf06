"""The cluster model shared by the live server and the simulator: nodes of GPUs and placement.

Worked example. Three nodes of 8 GPUs with 8, 3 and 5 GPUs free. A 2-GPU job goes to the node
with 3 free (best fit: it leaves the larger holes for larger jobs); a 4-GPU job to the node with
5 free; a 16-GPU job needs two whole free nodes (gang: all its GPUs at once) and so cannot start
here: only one node is entirely free.

CPU cores and memory are accounted per node when a node declares them (the live server's
machine does; simulated Philly nodes do not): a job of up to one node goes only where its CPUs
and memory fit too. A job on several nodes is charged its CPUs and memory split evenly over
them (rounded up: what each node's bundle reserves on Ray); gang jobs of the simulator are
placed by GPUs alone.

Shared GPUs. A job that declares its GPU memory (`--gpu-mem`) may share GPUs with other such
jobs; every other job gets whole GPUs. A shared GPU is a *slot*: one whole GPU taken from the
node's free count when its first job arrives, with the node's memory per GPU to hand out, given
back when its last job leaves. Worked example, GPUs of 80 GiB: a 20 GiB job opens slot A (60
left); a 30 GiB job joins A (best fit: the fullest slot that still fits; 30 left); a 40 GiB job
fits in no slot and opens B; a whole-GPU job meanwhile sees two GPUs fewer, never slot A or B.
A job asking for GPU memory on k GPUs takes k distinct slots of one node. Its placement is
`((node, 0),)` (it holds no whole GPU of its own); which slots it holds is `share_of(job)`.

GPU types. A machine with GPUs of several models (NVIDIA and AMD ones, say) is one node per
*pool* of GPUs of one model: the nodes carry their GPUs' type labels (`gpu_types`, see
`domain/gpu_types.py`) and share their machine's CPUs and memory (`host`: nodes of one host are
charged together). A job that names a type (`gpu_type`) is placed only on nodes whose labels
hold it; any job takes its GPUs from one node, so never from two pools of one machine, and a
job spread over several nodes takes them on distinct hosts. Without types (the simulator's
traces, a machine of one model) nothing of this changes a decision.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuyard.domain.gpu_types import ANY_TYPE, normalize_type

Placement = tuple[tuple[int, int], ...]  # ((node index, GPUs on it), ...)


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One machine as the scheduler sees it."""

    name: str
    gpus: int
    cpus: int | None = None  # None: not accounted
    mem_mib: int | None = None
    gpu_mem_mib: int | None = None  # memory of each GPU; None: unknown, no sharing here
    # The normalized types its GPUs answer to (`gpu_types.type_labels`; "*": any, GPUs of
    # unknown type); empty: untyped, no job naming a type goes here.
    gpu_types: frozenset[str] = field(default_factory=frozenset)
    # The machine this node's GPUs are in, when it holds several pools ("": a machine of its
    # own): nodes of one host share its CPUs and memory.
    host: str = ""


@dataclass(frozen=True, slots=True)
class Share:
    """A job on shared GPUs: `gpus` distinct slots of one node with `gpu_mem_mib` on each.
    `slots` pins the slot ids (a restarted server re-creating what runs); None: best fit."""

    owner: int
    gpus: int
    gpu_mem_mib: int
    slots: tuple[int, ...] | None = None


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
        self._slots: list[dict[int, int]] = [{} for _ in nodes]  # slot id -> free GPU MiB
        self._shares: dict[int, tuple[int, tuple[int, ...], int]] = {}  # owner -> node, slots, MiB
        self._next_slot = 0
        # Nodes charged together for CPUs and memory (one machine's pools), per node.
        by_host: dict[str, list[int]] = {}
        for i, n in enumerate(nodes):
            if n.host:
                by_host.setdefault(n.host, []).append(i)
        self._siblings: list[tuple[int, ...]] = [
            tuple(by_host[n.host]) if n.host else (i,) for i, n in enumerate(nodes)
        ]
        self._typed: dict[str, frozenset[int]] = {}  # a job's type -> the nodes of that type
        # Fewest whole GPUs on one node that failed to place since the last release, per (GPU
        # type, CPUs, memory) asked, as `_share_failed`: a deep queue that cannot start (one
        # full type while another has room; GPUs free but every CPU taken) costs a lookup per
        # job, not a search of the nodes (found profiling submits: a pass tried every job).
        self._whole_failed: dict[tuple[str, int, int], int] = {}
        # Smallest GPU memory a share of (GPUs, CPUs, memory) failed to find since the last
        # release: allocations only take room away, so a larger one fails too. A pass over a
        # deep queue of shares on a full cluster then costs a lookup per job, not a search.
        self._share_failed: dict[tuple[int, int, int, tuple[int, ...] | None], int] = {}

    def add_node(self, spec: NodeSpec) -> int:
        """A machine (or one pool of it) that joined a running cluster: all of it free, at the
        end of the node list (no index held by a placement moves). Returns its index."""
        node = len(self.nodes)
        self.nodes.append(spec)
        if spec.gpus > self.node_gpus:
            self._buckets.extend(set() for _ in range(spec.gpus - self.node_gpus))
            self.node_gpus = spec.gpus
        self.free.append(spec.gpus)
        self._buckets[spec.gpus].add(node)
        self.total_gpus += spec.gpus
        self.free_gpus += spec.gpus
        self.free_cpus.append(float("inf") if spec.cpus is None else float(spec.cpus))
        self.free_mem_mib.append(float("inf") if spec.mem_mib is None else float(spec.mem_mib))
        self._slots.append({})
        siblings = tuple(
            i for i, n in enumerate(self.nodes) if spec.host and n.host == spec.host
        ) or (node,)
        for each in siblings:
            if each != node:
                self._siblings[each] = siblings
        self._siblings.append(siblings)
        self._typed.clear()  # more room: every cached answer may differ now
        self._whole_failed.clear()
        self._share_failed.clear()
        return node

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

    def nodes_of_type(self, gpu_type: str) -> frozenset[int] | None:
        """The nodes whose GPUs are of `gpu_type`; None: no type asked for (every node)."""
        if not gpu_type:
            return None
        found = self._typed.get(gpu_type)
        if found is None:
            wanted = normalize_type(gpu_type)
            found = frozenset(
                i for i, n in enumerate(self.nodes)
                if wanted in n.gpu_types or ANY_TYPE in n.gpu_types
            )  # fmt: skip
            self._typed[gpu_type] = found
        return found

    def would_fit(self, free: list[int], gpus: int, nodes: int = 1, gpu_type: str = "") -> bool:
        """Whether `gpus` could be placed if the nodes had `free` GPUs (what-if planning, same
        rules as `place`; `nodes` > 1: `gpus // nodes` on each of that many nodes)."""
        allowed = self.nodes_of_type(gpu_type)
        if allowed is not None:
            free = [f if i in allowed else 0 for i, f in enumerate(free)]
        if nodes > 1:
            return sum(1 for f in free if f >= gpus // nodes) >= nodes
        size = self.node_gpus
        if gpus <= size:
            return any(f >= gpus for f in free)
        whole = sum(1 for i, f in enumerate(free) if f == size and self.nodes[i].gpus == size)
        return whole >= -(-gpus // size)

    def place(
        self,
        gpus: int,
        cpus: int = 0,
        mem_mib: int = 0,
        gpu_mem_mib: int = 0,
        only_nodes: tuple[int, ...] | None = None,
        nodes: int = 1,
        gpu_type: str = "",
        excluding: frozenset[int] = frozenset(),
    ) -> Placement | None:
        """Where a job would go now, or None. Does not allocate. A job that asks for CPUs or
        memory is always given a node, even without GPUs, so they can be charged there. A job
        that asks for GPU memory goes on shared GPUs (`gpu_mem_mib` on each of `gpus`), on one
        of `only_nodes` if given. A job of `nodes` > 1 takes `gpus // nodes` on each of that
        many distinct nodes (best fit on each). `gpu_type`: only on nodes of that type.
        `excluding`: never on these nodes (a reservation holds them for another job)."""
        if excluding:
            return self._place_excluding(gpus, cpus, mem_mib, gpu_mem_mib, only_nodes, nodes,
                                         gpu_type, excluding)  # fmt: skip
        allowed = self.nodes_of_type(gpu_type)
        if allowed is not None and gpus == 0:
            allowed = None  # a job without GPUs: its type asks for nothing
        if gpu_mem_mib:
            if allowed is not None:
                only_nodes = tuple(
                    n for n in (range(len(self.nodes)) if only_nodes is None else only_nodes)
                    if n in allowed
                )  # fmt: skip
            return self._place_shared(gpus, cpus, mem_mib, gpu_mem_mib, only_nodes)
        if nodes > 1:
            return self._place_spread(gpus // nodes, nodes, cpus, mem_mib, allowed)
        if gpus > self.free_gpus:
            return None
        if gpus == 0 and not (cpus or mem_mib):
            return ()
        if gpus <= self.node_gpus:
            shape = (gpu_type, cpus, mem_mib)
            if gpus >= self._whole_failed.get(shape, 1 << 30):
                return None
            for free in range(gpus, self.node_gpus + 1):
                bucket = self._buckets[free]
                if not bucket:
                    continue
                if allowed is not None:
                    bucket = bucket & allowed
                    if not bucket:
                        continue
                if not (cpus or mem_mib):
                    return ((min(bucket), gpus),)
                for node in sorted(bucket):
                    if self.free_cpus[node] >= cpus and self.free_mem_mib[node] >= mem_mib:
                        return ((node, gpus),)
            self._whole_failed[shape] = gpus
            return None
        need = -(-gpus // self.node_gpus)
        whole = self._distinct_hosts(sorted(self._buckets[self.node_gpus]), allowed)
        if len(whole) < need:
            return None
        return tuple((i, self.node_gpus) for i in whole[:need])

    def _place_excluding(
        self,
        gpus: int,
        cpus: int,
        mem_mib: int,
        gpu_mem_mib: int,
        only_nodes: tuple[int, ...] | None,
        nodes: int,
        gpu_type: str,
        excluding: frozenset[int],
    ) -> Placement | None:
        """`place` on the nodes not in `excluding`: the same best fit among the others (the
        failure cache is not written: it holds for every node)."""
        first = self.place(gpus, cpus, mem_mib, gpu_mem_mib, only_nodes, nodes, gpu_type)
        if first is None or gpus == 0 or not any(node in excluding for node, _ in first):
            return first  # (a job without GPUs takes none of the reserved ones)
        if gpu_mem_mib or nodes > 1:  # rare shapes: no search of the other nodes
            return None
        allowed = self.nodes_of_type(gpu_type)
        if gpus <= self.node_gpus:
            for free in range(gpus, self.node_gpus + 1):
                bucket = self._buckets[free] - excluding
                if allowed is not None:
                    bucket &= allowed
                for node in sorted(bucket):
                    if self.free_cpus[node] >= cpus and self.free_mem_mib[node] >= mem_mib:
                        return ((node, gpus),)
            return None
        need = -(-gpus // self.node_gpus)
        whole = self._distinct_hosts(sorted(self._buckets[self.node_gpus] - excluding), allowed)
        if len(whole) < need:
            return None
        return tuple((i, self.node_gpus) for i in whole[:need])

    def _distinct_hosts(self, nodes: list[int], allowed: frozenset[int] | None) -> list[int]:
        """`nodes` of the type asked for, at most one per host (a job on several nodes wants
        several machines, not two pools of one)."""
        hosts: set[str] = set()
        return [n for n in nodes
                if (allowed is None or n in allowed) and self._takes_host(n, hosts)]  # fmt: skip

    def _takes_host(self, node: int, hosts: set[str]) -> bool:
        """Whether `node` is on a host not in `hosts` yet, which it then joins (a node with no
        host name is a machine of its own)."""
        host = self.nodes[node].host
        if not host:
            return True
        if host in hosts:
            return False
        hosts.add(host)
        return True

    def _place_spread(
        self, per_node: int, nodes: int, cpus: int, mem_mib: int, allowed: frozenset[int] | None
    ) -> Placement | None:
        """`per_node` GPUs on each of `nodes` distinct nodes (of distinct hosts), with their
        share of the CPUs and memory: the fullest nodes that fit."""
        if per_node * nodes > self.free_gpus:
            return None
        cpus_each, mem_each = -(-cpus // nodes), -(-mem_mib // nodes)
        chosen: list[int] = []
        hosts: set[str] = set()
        for free in range(per_node, self.node_gpus + 1):
            for node in sorted(self._buckets[free]):
                if allowed is not None and node not in allowed:
                    continue
                if self.free_cpus[node] < cpus_each or self.free_mem_mib[node] < mem_each:
                    continue
                if not self._takes_host(node, hosts):
                    continue
                chosen.append(node)
                if len(chosen) == nodes:
                    return tuple((n, per_node) for n in sorted(chosen))
        return None

    def _place_shared(
        self, gpus: int, cpus: int, mem_mib: int, want: int, only: tuple[int, ...] | None
    ) -> Placement | None:
        """Best fit over nodes: open as few new GPUs as possible, then leave the least memory
        over in the slots taken."""
        key = (gpus, cpus, mem_mib, only)
        if want >= self._share_failed.get(key, 1 << 62):
            return None
        best: tuple[int, int, int] | None = None
        for node in range(len(self.nodes)) if only is None else only:
            spec = self.nodes[node]
            if spec.gpu_mem_mib is None or spec.gpu_mem_mib < want or gpus > spec.gpus:
                continue
            if self.free_cpus[node] < cpus or self.free_mem_mib[node] < mem_mib:
                continue
            choice = self._slot_choice(node, gpus, want)
            if choice is None:
                continue
            joined, opened = choice
            leftover = sum(self._slots[node][slot] - want for slot in joined)
            cost = (opened, leftover, node)
            if best is None or cost < best:
                best = cost
                if cost[:2] == (0, 0):
                    break  # an exact fit in shared GPUs: nothing beats it
        if best is None:
            self._share_failed[key] = want
            return None
        return ((best[2], 0),)

    def _slot_choice(self, node: int, gpus: int, want: int) -> tuple[list[int], int] | None:
        """The fullest slots of `node` that still fit `want` (up to `gpus` of them) and how
        many GPUs must be opened for the rest; None if the node has too few free GPUs."""
        slots = self._slots[node]
        if gpus == 1:  # most shares: the fullest fitting slot, without a sort
            fullest = min(((free, slot) for slot, free in slots.items() if free >= want),
                          default=None)  # fmt: skip
            if fullest is not None:
                return [fullest[1]], 0
            return None if self.free[node] < 1 else ([], 1)
        fitting = sorted((free, slot) for slot, free in slots.items() if free >= want)
        joined = [slot for _, slot in fitting[:gpus]]
        opened = gpus - len(joined)
        return None if opened > self.free[node] else (joined, opened)

    def share_of(self, owner: int) -> tuple[int, tuple[int, ...]] | None:
        """(node, slot ids) of a job on shared GPUs, None if it holds none."""
        held = self._shares.get(owner)
        return None if held is None else held[:2]

    def slot_open(self, node: int, slot: int) -> bool:
        return slot in self._slots[node]

    def slot_free_mib(self, node: int, slot: int) -> int | None:
        """GPU memory still free on a shared GPU; None: no such slot (any more)."""
        return self._slots[node].get(slot)

    def most_free_shared_mib(self) -> int | None:
        """The most GPU memory free on any shared GPU; None: no GPU is shared."""
        return max((free for slots in self._slots for free in slots.values()), default=None)

    def allocate(
        self, placement: Placement, cpus: int = 0, mem_mib: int = 0, share: Share | None = None
    ) -> None:
        """Take what `place` chose; checked first, so a bad placement changes nothing."""
        for node, gpus in placement:
            if gpus > self.free[node]:
                raise ValueError(f"node {node} has {self.free[node]} free GPUs, not {gpus}")
        for node, (node_cpus, node_mem) in charges(placement, cpus, mem_mib).items():
            if node_cpus > self.free_cpus[node] or node_mem > self.free_mem_mib[node]:
                raise ValueError(f"node {node} would have negative free CPUs or memory")
        for node, gpus in placement:
            self._move(node, self.free[node] - gpus)
        self._charge(placement, -cpus, -mem_mib)
        if share is not None and placement:
            self._take_slots(placement[0][0], share)

    def release(
        self, placement: Placement, cpus: int = 0, mem_mib: int = 0, owner: int | None = None
    ) -> None:
        self._share_failed.clear()  # room came back: every share may fit again
        self._whole_failed.clear()
        for node, gpus in placement:
            self._move(node, self.free[node] + gpus)
        self._charge(placement, cpus, mem_mib)
        held = self._shares.pop(owner, None) if owner is not None else None
        if held is not None:
            node, slots, want = held
            for slot in slots:
                self._slots[node][slot] += want
                if self._slots[node][slot] >= (self.nodes[node].gpu_mem_mib or 0):
                    del self._slots[node][slot]  # its last job left: a whole GPU again
                    self._move(node, self.free[node] + 1)

    def _take_slots(self, node: int, share: Share) -> None:
        capacity = self.nodes[node].gpu_mem_mib
        if capacity is None or share.owner in self._shares:
            raise ValueError(f"job {share.owner} cannot take shared GPUs on node {node}")
        slots = self._slots[node]
        if share.slots is None:
            choice = self._slot_choice(node, share.gpus, share.gpu_mem_mib)
            if choice is None:
                raise ValueError(f"node {node} has no room for job {share.owner}'s GPU memory")
            joined, opened = choice
            chosen = [*joined, *range(self._next_slot, self._next_slot + opened)]
            self._next_slot += opened
        else:
            chosen = list(share.slots)
        for slot in chosen:
            if slot not in slots:
                self._move(node, self.free[node] - 1)
                slots[slot] = capacity
            if slots[slot] < share.gpu_mem_mib:
                raise ValueError(f"slot {slot} of node {node} lacks the GPU memory asked for")
            slots[slot] -= share.gpu_mem_mib
        self._shares[share.owner] = (node, tuple(chosen), share.gpu_mem_mib)

    def _charge(self, placement: Placement, cpus: int, mem_mib: int) -> None:
        for node, (node_cpus, node_mem) in charges(placement, cpus, mem_mib).items():
            for each in self._siblings[node]:  # one machine's pools share its CPUs and memory
                self.free_cpus[each] += node_cpus
                self.free_mem_mib[each] += node_mem
            if self.free_cpus[node] < 0 or self.free_mem_mib[node] < 0:
                raise ValueError(f"node {node} would have negative free CPUs or memory")

    def _move(self, node: int, new_free: int) -> None:
        if not 0 <= new_free <= self.nodes[node].gpus:
            raise ValueError(f"node {node} would have {new_free} free GPUs")
        self._buckets[self.free[node]].discard(node)
        self.free_gpus += new_free - self.free[node]
        self.free[node] = new_free
        self._buckets[new_free].add(node)


def charges(placement: Placement, cpus: int, mem_mib: int) -> dict[int, tuple[int, int]]:
    """CPUs and memory a placement charges per node: all of them on a one-node job's node;
    split evenly, rounded up, over the nodes of a job on several (what each node's bundle
    reserves on Ray). Negative amounts (a release) are split the same way."""
    if not placement or not (cpus or mem_mib):
        return {}
    n = len(placement)
    if n == 1:
        return {placement[0][0]: (cpus, mem_mib)}
    each = (_split(cpus, n), _split(mem_mib, n))
    return {node: each for node, _ in placement}


def _split(amount: int, parts: int) -> int:
    share = -(-abs(amount) // parts)
    return share if amount >= 0 else -share
