"""Gang launch on Ray: one job spanning several nodes, started, watched and stopped as one.

`launch()` (server side, blocking until every node's command runs, or raising
`GangLaunchError` with nothing left behind):

1. a placement group `gpuyard-job-<id>`, one bundle `{"GPU": g, "CPU": c}` per node, STRICT_SPREAD
   (STRICT_PACK for one node), each bundle pinned to the node gpuyard's scheduler chose with
   `bundle_label_selector=[{"ray.io/node-id": <node id>}]`: Ray 2.60 labels every node with
   its id, on any cluster, so pinning needs neither IPs (all local test nodes share 127.0.0.1)
   nor custom resources the admin would have to declare. A bundle whose node is gone (or
   busy) cannot be placed, so the group is never ready: waited for at most `ready_timeout_s`,
   then removed (`GangLaunchError.node_id` names a node Ray lists dead, if one is);
2. one `NodeRunner` actor per bundle (`PlacementGroupSchedulingStrategy`, the bundle's GPUs and
   CPUs, no restarts), which reports its node, IP and the GPU ids Ray gave it;
3. master address = rank 0's node IP as Ray reports it; master port = the caller's, or else a
   port the rank-0 actor finds free *on rank 0's node* (the server cannot know which ports are
   free on another machine; the server's own `RendezvousPorts` only covers its machine);
4. each actor starts `argv_for(node_rank, master_addr, master_port)` under the same supervisor
   as a local job (node mode, see node.py), with `env` over the node's own environment,
   `GPUYARD_NODE_RANK`/`GPUYARD_NUM_NODES`, and Ray's CUDA_VISIBLE_DEVICES; each supervisor
   enforces the time limit on its node, from its own start.

The returned `GangHandle` (`gang_handle.py`) writes the nodes' output to the job's one log,
decides the outcome, and stops and cleans up every node at the end.

Not covered: the placement group and actors share the server process's fate (Ray removes them
when the driver exits), so unlike local jobs a Ray job does not survive a server restart.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

# Only `import ray` (attribute access below): `tests/ray` makes ruff's isort take a bare `ray`
# for first-party but `ray.util...` for third-party, which would split Ray's imports in two.
import ray

from gpuyard.adapters.ray.gang_handle import GangHandle, GangNode, GangResult, node_alive, teardown
from gpuyard.adapters.ray.node import NodeRunner

NODE_ID_LABEL = "ray.io/node-id"
_RemoteRunner: Any = None  # ray.remote(NodeRunner), made once


class GangLaunchError(RuntimeError):
    """The job could not be started; nothing of it is left on the cluster."""

    def __init__(self, message: str, node_id: str | None = None) -> None:
        super().__init__(message)
        self.node_id = node_id  # the node that is missing or failed, when known


def launch(
    job_id: int,
    per_node: Sequence[tuple[str, int, int]],
    argv_for: Callable[[int, str, int], list[str]],
    env: Mapping[str, str],
    log_path: str | os.PathLike[str],
    grace_s: float = 10.0,
    time_limit_s: float | None = None,
    *,
    master_port: int | None = None,
    workdir: str | None = None,
    ready_timeout_s: float = 60.0,
    on_end: Callable[[GangResult], None] | None = None,
    stop_signal: int = 15,
    warn: tuple[int, int] = (0, 0),
) -> GangHandle:
    """Start one command per node `(node_id, gpus, cpus)`, node rank = position in `per_node`.

    Blocks until every node's command has started (about a second: the placement group, then
    one Ray worker process per node). `env` is the job's environment (e.g. `build_job_env`
    with an empty base): it is laid over each node's own environment. `workdir`: where the
    commands run on their nodes (must exist there), default the Ray worker's directory.
    `stop_signal`: what a stop sends first (then SIGKILL after `grace_s`); `warn`: (signal,
    seconds) each node's supervisor sends that long before the time limit (0, 0: none).
    """
    _validate(per_node)
    n = len(per_node)
    # Opened first: a log that cannot be written fails the launch before anything runs.
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    pg: Any = None
    actors: list[Any] = []
    started = False
    try:
        pg = ray.util.placement_group(
            [_bundle(gpus, cpus) for _, gpus, cpus in per_node],
            strategy="STRICT_SPREAD" if n > 1 else "STRICT_PACK",
            name=f"gpuyard-job-{job_id}",
            bundle_label_selector=[{NODE_ID_LABEL: node_id} for node_id, _, _ in per_node],
        )
        _wait_placed(pg, per_node, ready_timeout_s)
        _add_actors(actors, pg, per_node)  # one by one: those made are torn down on a failure
        nodes, port = _node_facts(actors, per_node, master_port, ready_timeout_s)
        master_addr = nodes[0].ip
        starts = []
        for rank, actor in enumerate(actors):
            node_env = {**env, "GPUYARD_NODE_RANK": str(rank), "GPUYARD_NUM_NODES": str(n)}
            argv = list(argv_for(rank, master_addr, port))
            starts.append(
                actor.start.remote(
                    argv, node_env, float(grace_s), workdir, time_limit_s, stop_signal, warn
                )
            )
        _get(starts, ready_timeout_s, per_node)
        handle = GangHandle(job_id, nodes, master_addr, port, pg, actors, log_fd,
                            log_path, grace_s, time_limit_s)  # fmt: skip
        started = True
        if on_end is not None:
            handle.add_done_callback(on_end)
        handle._note(
            f"job {job_id}: {n} node(s), master {master_addr}:{port}, placement group {pg.id.hex()}"
        )
        for node in nodes:
            handle._note(
                f"node{node.rank} = {node.hostname} ({node.ip}) ray node {node.node_id[:12]}, "
                f"GPUs {node.cuda_visible_devices or '-'}"
            )
        handle._run()
        return handle
    finally:
        if not started:
            os.close(log_fd)
            teardown(actors, pg, grace_s)


def _wait_placed(pg: Any, per_node: Sequence[tuple[str, int, int]], timeout_s: float) -> None:
    """The placement group placed, or a GangLaunchError naming a node Ray lists dead."""
    ready, _ = ray.wait([pg.ready()], timeout=timeout_s)
    if not ready:
        missing = _first_missing_node([node_id for node_id, _, _ in per_node])
        why = f"node {missing} is not alive" if missing else "its resources are in use"
        raise GangLaunchError(f"placement group not ready after {timeout_s:g}s: {why}", missing)


def _add_actors(actors: list[Any], pg: Any, per_node: Sequence[tuple[str, int, int]]) -> None:
    """One `NodeRunner` per bundle, appended to `actors` as each is made."""
    runner = _remote_runner()
    for rank, (_, gpus, cpus) in enumerate(per_node):
        strategy = ray.util.scheduling_strategies.PlacementGroupSchedulingStrategy(
            pg, placement_group_bundle_index=rank
        )
        actors.append(
            runner.options(
                num_gpus=gpus,
                num_cpus=cpus,
                scheduling_strategy=strategy,
                max_restarts=0,
                max_task_retries=0,
                max_concurrency=4,
                name=None,
                lifetime=None,
            ).remote()
        )


def _node_facts(
    actors: list[Any], per_node: Sequence[tuple[str, int, int]], master_port: int | None,
    timeout_s: float,
) -> tuple[tuple[GangNode, ...], int]:  # fmt: skip
    """Each node's facts and the master port (the caller's, or one free on rank 0's node), in
    one round trip; a node on another machine than the one chosen is a GangLaunchError."""
    n = len(actors)
    asks = [a.info.remote() for a in actors]
    if master_port is None:
        asks.append(actors[0].free_port.remote())
    answers = _get(asks, timeout_s, per_node)
    port = answers[n] if master_port is None else master_port
    nodes = tuple(
        GangNode(
            rank=rank,
            node_id=info["node_id"],
            ip=info["ip"],
            hostname=info["hostname"],
            gpu_ids=tuple(info["gpu_ids"]),
            cuda_visible_devices=info["cuda_visible_devices"],
            worker_pid=int(info["pid"]),
        )
        for rank, info in enumerate(answers[:n])
    )
    for node, (wanted, _, _) in zip(nodes, per_node, strict=True):
        if node.node_id != wanted:
            raise GangLaunchError(f"node rank {node.rank} landed on {node.node_id}", wanted)
    return nodes, int(port)


def _validate(per_node: Sequence[tuple[str, int, int]]) -> None:
    if not per_node:
        raise ValueError("a gang job needs at least one node")
    ids = [node_id for node_id, _, _ in per_node]
    if len(set(ids)) != len(ids):
        raise ValueError("each node may appear once (one bundle per node, STRICT_SPREAD)")
    for node_id, gpus, cpus in per_node:
        if gpus < 0 or cpus < 0 or gpus + cpus == 0:
            raise ValueError(f"node {node_id}: needs GPUs or CPUs (got {gpus}, {cpus})")


def _bundle(gpus: int, cpus: int) -> dict[str, float]:
    bundle: dict[str, float] = {}
    if gpus:
        bundle["GPU"] = float(gpus)
    if cpus:
        bundle["CPU"] = float(cpus)
    return bundle


def _remote_runner() -> Any:
    global _RemoteRunner
    if _RemoteRunner is None:
        _RemoteRunner = ray.remote(NodeRunner)
    return _RemoteRunner


def _get(refs: list[Any], timeout_s: float, per_node: Sequence[tuple[str, int, int]]) -> list[Any]:
    """ray.get for the launch steps, turning Ray's errors into a GangLaunchError."""
    try:
        return list(ray.get(refs, timeout=timeout_s))
    except ray.exceptions.GetTimeoutError as exc:
        raise GangLaunchError(f"the job's node actors did not answer in {timeout_s:g}s") from exc
    except ray.exceptions.RayError as exc:
        missing = _first_missing_node([node_id for node_id, _, _ in per_node])
        raise GangLaunchError(f"starting the job's node actors failed: {exc}", missing) from exc


def _first_missing_node(node_ids: list[str]) -> str | None:
    for node_id in node_ids:
        if node_alive(node_id) is False:
            return node_id
    return None
