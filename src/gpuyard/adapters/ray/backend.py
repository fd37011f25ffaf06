"""The Ray backend's wiring: connect (or start a local cluster), turn Ray's nodes into the
server's inventory, and watch nodes come and go.

The machines: every alive node with GPUs (all alive nodes if none has one), named by its Ray
node name (made unique with `#k` if names repeat). Their GPUs are what each machine's agent
detects (`machines.py`), numbered across the cluster in the order `machine_book.py` keeps.

Lost, returning and new nodes: `NodeWatch` polls Ray's node table (every second); a node of
the inventory that is no longer alive has its GPUs drained (source `ray`, reason "Ray node ...
was lost"): no job is placed there, a job still on it ends NODE_FAIL. When a node of that name
is alive again (Ray gives it a new id), its GPUs are resumed. A node of a new name is a machine
that joins: the server starts its agent and schedules its GPUs from then on.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpuyard.adapters.ray.cluster import LocalNodeSpec, RayConnection, RayNode
from gpuyard.domain.errors import InvalidRequest
from gpuyard.domain.job import Gpu, NodeCapacity

log = logging.getLogger("gpuyard.ray")

_LOCAL_NODES = re.compile(r"^(\d+)x(\d+)(?:x(\d+))?$")


def connect(
    state_dir: os.PathLike[str] | str,
    address: str | None,
    token_file: str | None,
    local_nodes: str | None,
    node_timeout_s: float | None,
) -> RayConnection:
    """The server's Ray connection: an existing cluster (its token from `token_file` or
    `GPUYARD_RAY_TOKEN`), else a loopback-only local one."""
    if address:
        token = os.environ.get("GPUYARD_RAY_TOKEN")
        if token_file:
            return RayConnection.connect(address, _path(token_file))
        if not token:
            raise InvalidRequest(
                "--ray-address needs the cluster's token: set GPUYARD_RAY_TOKEN_FILE (a file "
                "holding it) or GPUYARD_RAY_TOKEN",
                field="ray_address",
            )
        return RayConnection.connect(address, token)
    nodes = parse_local_nodes(local_nodes, os.environ.get(LOCAL_NODE_ENV))
    return RayConnection.start_local(state_dir, nodes=nodes, node_timeout_s=node_timeout_s)


# Development and tests: what each extra local node's processes see in their environment, as a
# JSON object {"1": {"VAR": "value"}, ...} by node index (node 0 is the server's own process),
# so the "machines" of a one-machine cluster each have their own GPUs (fake NVML) and folder.
LOCAL_NODE_ENV = "GPUYARD_RAY_LOCAL_NODE_ENV"


def parse_local_nodes(spec: str | None, node_env: str | None = None) -> list[LocalNodeSpec]:
    """`NxG[xC]`: N local nodes of G GPUs (and C CPUs, default 2); None: one node, detected.
    `node_env`: the LOCAL_NODE_ENV JSON."""
    envs = _node_envs(node_env)
    if not spec:
        return [LocalNodeSpec()]
    match = _LOCAL_NODES.match(spec.strip())
    if not match or int(match.group(1)) < 1:
        raise InvalidRequest(
            f"GPUYARD_RAY_LOCAL_NODES={spec!r}: use NxG or NxGxC, e.g. 2x2 (2 nodes of 2 GPUs)",
            field="ray_local_nodes",
        )
    count, gpus, cpus = int(match.group(1)), int(match.group(2)), int(match.group(3) or 2)
    return [
        LocalNodeSpec(gpus=gpus, cpus=cpus, env=tuple(sorted(envs.get(str(i), {}).items())))
        for i in range(count)
    ]


def _node_envs(text: str | None) -> dict[str, dict[str, str]]:
    if not text:
        return {}
    try:
        found = json.loads(text)
        if isinstance(found, dict) and all(
            isinstance(env, dict) and all(isinstance(v, str) for v in env.values())
            for env in found.values()
        ):
            return found
    except ValueError:
        pass
    raise InvalidRequest(
        f'{LOCAL_NODE_ENV}: give a JSON object by node index, e.g. {{"1": {{"VAR": "value"}}}}',
        field="ray_local_nodes",
    )


@dataclass(frozen=True, slots=True)
class RayInventory:
    gpus: list[Gpu]
    nodes: list[NodeCapacity]
    ray_nodes: list[RayNode]  # the Ray nodes behind `nodes`, in the same order


def inventory(found: list[RayNode], gpu_mem_mib: int | None) -> RayInventory:
    """The server's machines and GPUs from Ray's alive nodes."""
    alive = [node for node in found if node.alive]
    used = [node for node in alive if node.gpus] or alive[:1]
    names = unique_names(used)
    gpus: list[Gpu] = []
    nodes = []
    for node in used:
        name = names[node.node_id]
        nodes.append(NodeCapacity(name, max(1, node.cpus), node.mem_mib))
        for i in range(node.gpus):
            gpus.append(Gpu(len(gpus), f"{name}/gpu{i}", "Ray GPU", gpu_mem_mib, False, name))
    return RayInventory(gpus, nodes, used)


def unique_names(nodes: list[RayNode]) -> dict[str, str]:
    """node id -> gpuyard node name: Ray's node name, `#k` added where names repeat."""
    names: dict[str, str] = {}
    seen: dict[str, int] = {}
    for node in nodes:
        base = _base_name(node)
        count = seen.get(base, 0)
        seen[base] = count + 1
        names[node.node_id] = base if count == 0 else f"{base}#{count}"
    return names


class NodeWatch:
    """Polls Ray's nodes: `on_lost(name)` once when an inventory machine's node dies,
    `on_back(name)` when a new node of the same Ray name appears (Ray gives a returning node a
    new id), `on_join(name, node)` for a node of a name never seen (a machine added to the
    running cluster; with GPUs, unless no machine has any). Machines are followed by node id,
    so a lost one never passes for another of the same name. `node_ids()` maps the machines
    alive now to their ids.

    A join runs on a thread of its own (starting the machine's agent takes seconds, a minute on
    a loaded machine), so a join never delays noticing a loss; one that fails is tried again
    after `RETRY_JOIN_S`."""

    RETRY_JOIN_S = 30.0

    def __init__(
        self,
        connection: RayConnection,
        nodes: list[RayNode],
        period_s: float = 1.0,
        *,
        away: Sequence[str] = (),
        grace_s: float = 300.0,
    ) -> None:
        """`away`: machines known from an earlier start that are not there now: `on_back` if
        one comes back, `on_lost` once `grace_s` has passed without it."""
        self._conn = connection
        names = unique_names(nodes)
        self._ids = {names[n.node_id]: n.node_id for n in nodes}  # machine -> current node id
        self._base = {names[n.node_id]: _base_name(n) for n in nodes}
        self._gone: set[str] = set(away)
        for name in away:
            self._ids[name] = ""  # no Ray node now
            self._base[name] = name.split("#")[0]
        self._grace_ends = {name: time.monotonic() + grace_s for name in away}
        self._joins_cpu_only = not any(n.gpus for n in nodes)
        self._joining: set[str] = set()  # node ids whose join runs now
        self._retry_at: dict[str, float] = {}  # node id -> when a failed join is tried again
        self._lock = threading.Lock()
        self._period_s = period_s
        self.on_lost: Callable[[str], object] = lambda name: None  # set by the server
        self.on_back: Callable[[str], object] = lambda name: None
        self.on_join: Callable[[str, RayNode], object] = lambda name, node: None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def node_ids(self) -> dict[str, str]:
        with self._lock:
            return {name: node_id for name, node_id in self._ids.items() if name not in self._gone}

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gpuyard-ray-nodes", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self._period_s):
            try:
                self.poll()
            except Exception:  # Ray unreachable for a moment: the next poll retries
                log.exception("reading Ray's nodes failed")

    def poll(self) -> None:
        alive = {node.node_id: node for node in self._conn.nodes() if node.alive}
        for name, node_id in list(self._ids.items()):
            if node_id not in alive and name not in self._gone and node_id not in self._joining:
                self._gone.add(name)
                log.warning("Ray node %s was lost: its GPUs are out of service", name)
                self.on_lost(name)
        now = time.monotonic()
        for name, ends in list(self._grace_ends.items()):
            if name not in self._gone:
                del self._grace_ends[name]  # it came back in time
            elif now >= ends:
                del self._grace_ends[name]
                log.warning("machine %s did not come back within the grace: its jobs are lost",
                            name)  # fmt: skip
                self.on_lost(name)
        bound = set(self._ids.values())
        for name in sorted(self._gone):
            back = next(
                (n for n in alive.values()
                 if n.node_id not in bound and _base_name(n) == self._base[name]),
                None,
            )  # fmt: skip
            if back is not None:
                with self._lock:
                    self._ids[name] = back.node_id
                bound.add(back.node_id)
                self._gone.discard(name)
                log.info("Ray node %s is back: its GPUs are in service again", name)
                self.on_back(name)
        self._find_joins(alive, bound)

    def _find_joins(self, alive: dict[str, RayNode], bound: set[str]) -> None:
        gone_bases = {self._base[name] for name in self._gone}
        now = time.monotonic()
        for node in sorted(alive.values(), key=_base_name):
            node_id = node.node_id
            if node_id in bound or node_id in self._joining or _base_name(node) in gone_bases:
                continue
            if not (node.gpus or self._joins_cpu_only) or self._retry_at.get(node_id, 0) > now:
                continue
            name = self._new_name(node)
            with self._lock:
                self._ids[name] = node_id
                self._base[name] = _base_name(node)
            self._joining.add(node_id)
            threading.Thread(
                target=self._join, args=(name, node), name=f"gpuyard-join-{name}", daemon=True
            ).start()

    def _new_name(self, node: RayNode) -> str:
        """Its Ray name, `#k` added if a machine of that name is known already."""
        base, names = _base_name(node), set(self._ids)
        count = 0
        while (name := base if count == 0 else f"{base}#{count}") in names:
            count += 1
        return name

    def _join(self, name: str, node: RayNode) -> None:
        try:
            self.on_join(name, node)
            log.info("Ray node %s joined: a machine of the server's now", name)
        except Exception as exc:
            log.warning("machine %s did not join (%s); trying again in %.0f s",
                        name, exc, self.RETRY_JOIN_S)  # fmt: skip
            with self._lock:
                self._ids.pop(name, None)
                self._base.pop(name, None)
            self._retry_at[node.node_id] = time.monotonic() + self.RETRY_JOIN_S
        finally:
            self._joining.discard(node.node_id)


def _base_name(node: RayNode) -> str:
    return node.name or node.hostname or node.ip


def _path(text: str) -> os.PathLike[str]:
    from pathlib import Path

    return Path(text).expanduser()
