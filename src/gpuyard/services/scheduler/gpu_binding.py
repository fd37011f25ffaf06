"""Which physical GPUs the policy's decisions run on.

The policy thinks in GPU counts per node (and in slots, for jobs sharing GPUs with
`--gpu-mem`); this module binds those to GPU indices. A job the policy started launches only
once every GPU it needs is physically free: not held by another job's processes (a preempted
job takes a moment to stop), not drained, not bound to a shared slot, not full of memory of
processes no job owns (`busy`, with why). Among free GPUs, cool ones go first (`hot`), then the
lowest index. A shared slot is bound to a physical GPU when its first job launches; its other
jobs launch there too, and the binding lasts until the slot closes.

Every machine's GPUs are bound here, a Ray cluster's too (its agents run each job on the GPUs
chosen, `binds_devices`). A machine that joins adds its nodes at the end (`add_machine`).
Touched only under the scheduler's lock, except `busy` and `hot`, which are replaced whole.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuyard.domain.gpu_types import gpu_labels, pools
from gpuyard.domain.job import Gpu, Job
from gpuyard.scheduling.cluster import ClusterState, Placement
from gpuyard.services.scheduler.inventory import Inventory
from gpuyard.services.scheduler.policy_steps import PolicyFeed

# Slot ids of shared GPUs re-created after a restart: GPU index + this, so they never collide
# with the ids the cluster gives new slots.
_REBUILT_SLOT = 1 << 40


@dataclass(frozen=True, slots=True)
class Launch:
    """Start `job_id` now on these physical GPUs of `node`."""

    job_id: int
    node: str
    gpus: tuple[int, ...]


class GpuBinding:
    """Physical GPUs: who holds them, which are out of service, which shared slot is where."""

    def __init__(self, inventory: Inventory) -> None:
        # The policy's nodes: one per machine, or one per pool of GPUs of one model on a
        # machine with several (`gpu_types.pools`: NVIDIA and AMD GPUs never in one job).
        self.node_names: list[str] = []
        self.node_gpus: list[list[int]] = []
        self.node_machine: list[int] = []  # index in `inventory.nodes`
        self.node_labels: list[frozenset[str]] = []  # the types its GPUs answer to
        self.node_host: list[str] = []  # the machine's name when it has several pools
        self.node_of: dict[int, int] = {}  # GPU index -> the policy's node
        self.slot_gpu: dict[tuple[int, int], int] = {}  # shared GPU (node, slot) -> physical
        self.holding: dict[int, tuple[int, ...]] = {}  # GPUs held by a job's processes
        self.drained: set[int] = set()  # GPUs out of service
        self.drain_charged: set[int] = set()  # drained GPUs the cluster counts as busy
        self.busy: Mapping[int, str] = {}  # free GPUs occupied by others' memory, and why
        self.hot: Mapping[int, str] = {}  # GPUs to hand out last, and why
        for machine, node in enumerate(inventory.nodes):
            indices = set(inventory.gpus_of(node.name))
            self.add_machine(machine, node.name, [g for g in inventory.gpus if g.index in indices])

    def add_machine(self, machine: int, name: str, gpus: Sequence[Gpu]) -> range:
        """The policy's nodes of one machine (`machine`: its index in the inventory's nodes),
        after those known: at the start, and when a machine joins. Returns their indices."""
        first = len(self.node_names)
        groups = list(pools(gpus).values())
        for group in groups or [[]]:
            self.node_of.update((gpu.index, len(self.node_names)) for gpu in group)
            self.node_names.append(name)
            self.node_gpus.append([gpu.index for gpu in group])
            self.node_machine.append(machine)
            self.node_labels.append(gpu_labels(group[0]) if group else frozenset())
            self.node_host.append(name if len(groups) > 1 else "")
        return range(first, len(self.node_names))

    def held_gpus(self) -> set[int]:
        return {gpu for gpus in self.holding.values() for gpu in gpus}

    def charge_drained(self, feed: PolicyFeed) -> None:
        """Keep drained GPUs out of the policy's cluster: each drained GPU no process holds is
        charged as busy; a resumed one is released. (A drained GPU a job still holds is charged
        once that job has ended.)"""
        held = self.held_gpus()
        for gpu in sorted(self.drain_charged - self.drained):
            feed.uncharge(self.node_of[gpu])
            self.drain_charged.discard(gpu)
        for gpu in sorted(self.drained - self.drain_charged - held):
            node = self.node_of.get(gpu)
            if node is None or feed.cluster.free[node] < 1:
                continue  # not ours, or counted for a job waiting to launch: next time
            feed.charge(node)
            self.drain_charged.add(gpu)

    def launchable(
        self, assigned: Mapping[int, Placement], cluster: ClusterState
    ) -> tuple[list[Launch], dict[int, str]]:
        """Assigned jobs whose GPUs are physically free now, in the order they were decided;
        and the assigned jobs that wait for `busy` GPUs, with why."""
        self._forget_closed_slots(cluster)
        held = self.held_gpus() | self.drained
        held |= set(self.slot_gpu.values())  # a shared GPU is its slot's until the slot closes
        busy, hot = self.busy, self.hot
        free = [
            sorted((g for g in gpus if g not in held and g not in busy), key=lambda g: g in hot)
            for gpus in self.node_gpus
        ]  # a cool GPU before a hot one; lowest index first otherwise
        blockers = "; ".join(busy[g] for g in sorted(g for g in busy if g not in held))
        launches, waiting_busy = [], {}
        for job_id, placement in assigned.items():
            if job_id in self.holding:
                continue  # chosen again while its preempted processes are still stopping
            launch = self._bind(job_id, placement, cluster, free)
            if launch is not None:
                launches.append(launch)
            elif blockers:  # else it waits for a preempted job's processes to go
                waiting_busy[job_id] = blockers
        return launches, waiting_busy

    def _bind(
        self, job_id: int, placement: Placement, cluster: ClusterState, free: list[list[int]]
    ) -> Launch | None:
        share = cluster.share_of(job_id)
        if share is not None:
            return self._bind_shared(job_id, share, free)
        if any(len(free[node]) < count for node, count in placement):
            return None
        gpus: list[int] = []
        for node, count in placement:
            gpus.extend(free[node][:count])
            del free[node][:count]
        names = ",".join(self.node_names[node] for node, _ in placement)
        return Launch(job_id, names or self.node_names[0], tuple(gpus))

    def _bind_shared(
        self, job_id: int, share: tuple[int, tuple[int, ...]], free: list[list[int]]
    ) -> Launch | None:
        """A job on shared GPUs: each slot's bound GPU, or a free one bound to it now (the slot's
        first job to launch); None if a slot needs a free GPU and there is none yet, or if a
        slot's GPU holds memory of processes no job owns (no job of the slot runs there now:
        that memory is not what the slot accounts for). A slot bound to a GPU drained since is
        bound afresh."""
        node, slots = share
        bound = self.slot_gpu
        unbound = [s for s in slots if bound.get((node, s), -1) in self.drained | {-1}]
        if len(unbound) > len(free[node]):
            return None
        if any(bound[(node, s)] in self.busy for s in slots if s not in unbound):
            return None
        for slot in unbound:
            bound[(node, slot)] = free[node].pop(0)
        return Launch(job_id, self.node_names[node], tuple(bound[(node, s)] for s in slots))

    def _forget_closed_slots(self, cluster: ClusterState) -> None:
        """Unbind shared GPUs whose last job left (the physical GPU is free again)."""
        for key in [k for k in self.slot_gpu if not cluster.slot_open(*k)]:
            del self.slot_gpu[key]

    def shared_free(self, cluster: ClusterState) -> dict[int, int]:
        """Physical GPU -> free GPU memory (MiB) the scheduler may still give to shared jobs."""
        free: dict[int, int] = {}
        for (node, slot), gpu in self.slot_gpu.items():
            mib = cluster.slot_free_mib(node, slot)
            if mib is not None:
                free[gpu] = mib
        return free

    def _machines_of(self, record: Job) -> Placement:
        """A job without GPUs, back on the machines it runs on (their first pool each): its
        CPUs and memory are charged there, not on the first machine (a restarted cluster
        server found its machines' CPU jobs all counted on its own)."""
        names = record.node.split(",") if record.node else []
        nodes = [self.node_names.index(name) for name in names if name in self.node_names]
        return tuple((node, 0) for node in sorted(set(nodes))) or ((0, 0),)

    def restored_placement(self, record: Job) -> tuple[Placement, tuple[int, ...] | None]:
        """Where a job still running after a restart is, in the policy's terms: whole GPUs, or
        the shared GPUs it runs on (one slot per physical GPU, bound to it again)."""
        per_node: dict[int, int] = {}
        for gpu in record.gpus:
            node = self.node_of.get(gpu, 0)
            per_node[node] = per_node.get(node, 0) + 1
        if not record.spec.gpu_mem_mib:
            return tuple(sorted(per_node.items())) or self._machines_of(record), None
        node = min(per_node, default=0)
        slots = tuple(_REBUILT_SLOT + gpu for gpu in record.gpus)
        for gpu, slot in zip(record.gpus, slots, strict=True):
            self.slot_gpu[(node, slot)] = gpu
        return ((node, 0),), slots
