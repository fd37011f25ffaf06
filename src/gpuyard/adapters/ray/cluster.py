"""Connecting the server to Ray, and the cluster's node inventory.

Two ways in, one `RayConnection` per server process (Ray's driver state is process-global):

- `RayConnection.start_local(state_dir, ...)`: the server's embedded default. The server process
  becomes the Ray head (`ray.init` starts GCS + raylet as its children, with Ray's reaper, so
  they end with the server); extra `nodes` are extra raylets on this machine (development and
  tests: each declares its own logical GPUs/CPUs). Everything binds 127.0.0.1 only: the node IP
  is loopback, which is also the address GCS, raylets, object managers, the dashboard agent
  and the runtime-env agent listen on; the dashboard (and with it Ray's job-submission API) is
  not started at all. Ray resolves a loopback *address* to the machine's IP in `ray.init`
  (`resolve_ip_for_localhost`), so the head is started by `ray.init` itself, with Ray's
  "local-only" switch (`ray_constants.ENABLE_RAY_CLUSTER`) off for that one call: the node IP
  then comes out as 127.0.0.1, and later look-ups use the started node's own IP.
- `RayConnection.connect(address, token)`: an existing cluster (`ray start --head` elsewhere),
  by its GCS address `host:port` (not `ray://`, which is Ray Client).

Token authentication (Ray 2.60, read from `ray/_private/authentication/`): the mode comes only
from the environment variable `RAY_AUTH_MODE` (`token` or `disabled`; setting it in
`_system_config` is refused); the token from `RAY_AUTH_TOKEN` (the token itself), else
`RAY_AUTH_TOKEN_PATH` (a file holding it), else `~/.ray/auth_token`. A new local `ray.init()`
turns token mode on by default and writes `~/.ray/auth_token` if it finds no token. Every
process of the cluster (GCS, raylets, workers, drivers) must see the same token: child processes
inherit it through the environment; other machines' `ray start` need it set the same way. The
C++ side caches the mode and the token, so after setting the variables we re-read them
(`ray._raylet.Config.initialize("")`, `AuthenticationTokenLoader.reset_cache()`).

gpuyard always sets `RAY_AUTH_MODE=token` and passes the token explicitly, never relying on
`~/.ray/auth_token`: `start_local` writes a fresh random token (or the given one) to
`STATE_DIR/ray_auth_token` (mode 0600) and points `RAY_AUTH_TOKEN_PATH` at it; `connect` takes
the token (a `Path` to a token file, or the token string) and refuses to connect without one.
These variables are set in the server's own environment (Ray reads nothing else); the Ray
adapter strips `RAY_*` from the environment of the jobs it runs.

A real multi-machine cluster (what the admin sets up; gpuyard only connects):
- every node: `RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=/path/to/token ray start ...`, the same
  token on all nodes and on the gpuyard server; gpuyard installed in the nodes' Python (the
  node actor and the job supervisor come from it);
- head: `ray start --head --node-ip-address=<cluster-network IP> --port=6379
  --include-dashboard=false` (or `--dashboard-host=127.0.0.1`); workers: `ray start
  --address=<head>:6379 --node-ip-address=<its IP>`; pin the ports that otherwise are random
  (`--node-manager-port`, `--object-manager-port`, `--min-worker-port/--max-worker-port`,
  `--dashboard-agent-grpc-port`, `--dashboard-agent-listen-port`, `--metrics-export-port`,
  `--runtime-env-agent-port`) so the firewall can allow them;
- open, only between cluster nodes and the gpuyard server: the GCS port (6379) on the head;
  on every node the raylet's node-manager and object-manager ports, the worker port range, the
  dashboard-agent gRPC port; plus, between job nodes, the torchrun master port (gpuyard picks a
  free one on rank 0's node per job) and NCCL's own ports. Nothing needs to be reachable from
  outside the cluster; keep the dashboard (8265) and Ray Client (10001) on loopback or closed.
"""

from __future__ import annotations

import importlib
import os
import secrets
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LOOPBACK = "127.0.0.1"
NAMESPACE = "gpuyard"
TOKEN_FILE = "ray_auth_token"
# Small: gpuyard's calls move only output lines; Ray's default is 30% of the machine's RAM.
_OBJECT_STORE_BYTES = 128 << 20
_connected = threading.Lock()  # held while a RayConnection is open: Ray allows one per process
# Ray's session folder (sockets, logs, the runtime env) goes in a 0700 folder of the server's:
# Ray's default, /tmp/ray, is world-writable (0777) with world-readable logs, and Ray makes
# every folder it creates 0777. Under the state dir (`ray/`), unless that path would make its
# sockets' paths longer than AF_UNIX allows (107 bytes): then a 0700 folder in the system's
# temporary directory.
_TEMP_FOLDER = "ray"
# What Ray puts below its temp dir for its longest socket: "/session_<date>_<time>_<us>_<pid>"
# (at most 43) + "/sockets/plasma_store" (21), and a margin.
_MAX_TEMP_CHARS = 107 - 43 - 21 - 4


@dataclass(frozen=True)
class RayNode:
    """One Ray node as the cluster reports it. A node that comes back gets a new `node_id`:
    match a returning machine by `hostname`/`ip`, not by id."""

    node_id: str
    name: str  # Ray's node name (`ray start --node-name`; by default the IP)
    hostname: str
    ip: str
    gpus: int
    cpus: int
    mem_mib: int
    alive: bool


@dataclass(frozen=True)
class LocalNodeSpec:
    """A node `start_local` starts on this machine; None = what Ray detects."""

    gpus: int | None = None
    cpus: int | None = None
    mem_mib: int | None = None
    # What this node's raylet (and so its agent and jobs) sees in its environment on top of
    # the server's: one machine's own GPU library or agent folder, for development and tests.
    env: tuple[tuple[str, str], ...] = ()


class RayConnection:
    """The server's connection to a Ray cluster (the driver), and the local nodes it started."""

    def __init__(
        self, address: str, local_nodes: Sequence[Any] = (), temp_root: Path | None = None
    ) -> None:
        self.address = address  # GCS host:port
        self._local_nodes = list(local_nodes)  # ray._private.node.Node of extra local raylets
        self._closed = False
        # The private folder holding a local cluster's session (removed at close).
        self.temp_root = temp_root

    # ---- connecting ---------------------------------------------------------------------

    @classmethod
    def start_local(
        cls,
        state_dir: str | os.PathLike[str],
        token: str | None = None,
        nodes: Sequence[LocalNodeSpec] = (LocalNodeSpec(),),
        *,
        node_timeout_s: float | None = None,
    ) -> RayConnection:
        """Start a loopback-only Ray cluster with this process as its head (`nodes[0]`).

        `token`: the cluster token (default: a fresh random one), written to
        `state_dir/ray_auth_token` with mode 0600. `node_timeout_s`: how long a silent raylet
        stays alive in GCS's eyes (Ray's default is about 30 s; tests use ~1.5 s).
        """
        import ray

        if not nodes:
            raise ValueError("start_local needs at least one node")
        token_path = write_token(Path(state_dir), token or secrets.token_hex(32))
        temp_root = private_temp_root(Path(state_dir))
        try:
            with _keep_sigterm():  # ray.init and each extra Node install their own handlers
                return cls._start_local(ray, token_path, nodes, node_timeout_s, temp_root)
        except BaseException:
            if temp_root.parent != Path(state_dir):  # a temporary one; the state dir's `ray/`
                shutil.rmtree(temp_root, ignore_errors=True)  # keeps Ray's logs of the failure
            raise

    @classmethod
    def _start_local(
        cls,
        ray: Any,
        token_path: Path,
        nodes: Sequence[LocalNodeSpec],
        node_timeout_s: float | None,
        temp_root: Path,
    ) -> RayConnection:
        _take_process_slot()
        temp_dir = str(temp_root / "t")
        local: list[Any] = []
        try:
            _use_token(token_path=token_path)
            head = nodes[0]
            with _local_only(ray._private.ray_constants):
                ctx = ray.init(
                    num_cpus=head.cpus,
                    num_gpus=head.gpus,
                    _memory=None if head.mem_mib is None else head.mem_mib << 20,
                    object_store_memory=_OBJECT_STORE_BYTES,
                    include_dashboard=False,
                    namespace=NAMESPACE,
                    log_to_driver=False,
                    configure_logging=False,
                    _node_name="gpuyard-local-0",
                    _temp_dir=temp_dir,
                    _system_config=_health_check_config(node_timeout_s),
                )
            address = str(ctx.address_info["gcs_address"])
            for index, spec in enumerate(nodes[1:], start=1):
                local.append(_start_local_node(address, spec, index, temp_dir))
            return cls(address, local, temp_root)
        except BaseException:
            _shutdown_quietly()
            _kill_local_nodes(local)
            _connected.release()
            raise

    @classmethod
    def connect(cls, address: str, token: str | os.PathLike[str]) -> RayConnection:
        """Connect to an existing cluster by its GCS address, with its token (a file if a Path).

        Note: Ray resolves a loopback address to this machine's IP; a cluster that listens on
        127.0.0.1 only can be joined from the process that started it, not from another one.
        """
        import ray

        if address.startswith("ray://"):
            raise ValueError("give the GCS address (host:port), not a Ray Client ray:// URL")
        if isinstance(token, str):
            if not token:
                raise ValueError("a Ray cluster token is required (token authentication)")
            token_kw: dict[str, Any] = {"token": token}
        else:
            token_kw = {"token_path": Path(token)}
        _reachable(address)
        _take_process_slot()
        try:
            _use_token(**token_kw)
            with _keep_sigterm():
                ctx = ray.init(
                    address=address,
                    namespace=NAMESPACE,
                    log_to_driver=False,
                    configure_logging=False,
                )
            return cls(str(ctx.address_info["gcs_address"]))
        except BaseException:
            _shutdown_quietly()
            _connected.release()
            raise

    def close(self) -> None:
        """Disconnect and stop the local nodes it started (the jobs run on under their
        supervisors: a restarted server re-adopts them)."""
        if self._closed:
            return
        self._closed = True
        try:
            # The extra local nodes first, gracefully, while the head still runs: otherwise
            # their dashboard and runtime-env agents outlive them (orphans ignoring SIGTERM).
            _kill_local_nodes(self._local_nodes)
            self._local_nodes.clear()
            _shutdown_quietly()  # also stops the head if this process started it
        finally:
            if self.temp_root is not None:
                shutil.rmtree(self.temp_root, ignore_errors=True)
            _connected.release()

    def __enter__(self) -> RayConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- inventory ----------------------------------------------------------------------

    def nodes(self) -> list[RayNode]:
        """Every node GCS knows, dead ones included (alive=False), head first."""
        import ray

        found = []
        for raw in ray.nodes():
            res = raw.get("Resources") or {}
            node = RayNode(
                node_id=str(raw["NodeID"]),
                name=str(raw.get("NodeName") or raw.get("NodeManagerAddress", "")),
                hostname=str(raw.get("NodeManagerHostname", "")),
                ip=str(raw.get("NodeManagerAddress", "")),
                gpus=int(res.get("GPU", 0)),
                cpus=int(res.get("CPU", 0)),
                mem_mib=int(res.get("memory", 0)) >> 20,
                alive=bool(raw.get("Alive")),
            )
            found.append(("node:__internal_head__" not in res, node))
        return [node for _, node in sorted(found, key=lambda pair: pair[0])]

    def local_raylet_pids(self) -> dict[str, int]:
        """node_id -> raylet pid of the extra local nodes (tests kill one to lose a node)."""
        import ray

        raylet = ray._private.ray_constants.PROCESS_TYPE_RAYLET
        pids = {}
        for node in self._local_nodes:
            for info in node.all_processes.get(raylet, []):
                pids[str(node.node_id)] = int(info.process.pid)
        return pids


def write_token(state_dir: Path, token: str) -> Path:
    """Write the token to `state_dir/ray_auth_token`, mode 0600 from the start; its path."""
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / TOKEN_FILE
    tmp = path.with_name(f".{TOKEN_FILE}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)  # even if a stale tmp file had other bits
        os.write(fd, token.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path


def _use_token(token: str | None = None, token_path: Path | None = None) -> None:
    """Token mode on, this token, for this process and the Ray processes it starts."""
    # Not in ray/_raylet.pyi (the compiled module has them): looked up dynamically.
    raylet: Any = importlib.import_module("ray._raylet")

    os.environ["RAY_AUTH_MODE"] = "token"
    if token_path is not None:
        os.environ["RAY_AUTH_TOKEN_PATH"] = str(token_path)
        os.environ.pop("RAY_AUTH_TOKEN", None)
    else:
        assert token
        os.environ["RAY_AUTH_TOKEN"] = token
        os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
    raylet.Config.initialize("")  # RayConfig read RAY_AUTH_MODE when ray was imported
    raylet.AuthenticationTokenLoader.instance().reset_cache()


def _reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail at once, in one line, when nothing listens at the GCS address: `ray.init` would
    retry for ever (and hold the server's start, deaf to SIGTERM, inside Ray's C++ client)."""
    import socket

    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{address!r} is not a GCS address: give host:port (e.g. head:6379)")
    hosts = [host.strip("[]")]
    if hosts[0] in ("127.0.0.1", "localhost", "::1"):  # Ray may use this machine's own IP
        import ray.util

        hosts.append(ray.util.get_node_ip_address())
    why = ""
    for where in hosts:
        try:
            socket.create_connection((where, int(port)), timeout=timeout_s).close()
            return
        except OSError as exc:
            why = exc.strerror or type(exc).__name__
    raise ConnectionError(
        f"nothing answers at {address} ({why}): is the cluster's head running there "
        "(`ray start --head`), and is this its GCS port (6379 unless --port was given)?"
    )


@contextmanager
def _keep_sigterm() -> Iterator[None]:
    """`ray.init` installs its own SIGTERM handler (exit 1); the server's is kept instead, so
    a stopped server shuts down as it does without Ray (uvicorn re-raises SIGTERM to it)."""
    main = threading.current_thread() is threading.main_thread()
    saved = signal.getsignal(signal.SIGTERM) if main else None
    try:
        yield
    finally:
        if saved is not None:
            signal.signal(signal.SIGTERM, saved)


@contextmanager
def _local_only(ray_constants: Any) -> Iterator[None]:
    """Make Ray take 127.0.0.1 as this machine's IP while the head starts (see the docstring)."""
    saved = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved


def _health_check_config(node_timeout_s: float | None) -> dict[str, Any]:
    if node_timeout_s is None:
        return {}
    period_ms = max(100, int(node_timeout_s * 1000 / 3))
    return {
        "health_check_initial_delay_ms": 0,
        "health_check_period_ms": period_ms,
        "health_check_timeout_ms": period_ms,
        "health_check_failure_threshold": 3,
    }


def private_temp_root(state_dir: Path) -> Path:
    """A new, empty folder only the server may enter (0700) for Ray's session: `ray/` under
    the state dir (what an earlier run left there is removed: one server per state dir), or
    one in the system's temporary directory when the state dir's path is too long for Ray's
    sockets. Ray's own folders go inside it, in `t/` (Ray makes those 0777: harmless behind
    a 0700 parent)."""
    root = state_dir / _TEMP_FOLDER
    if len(str(root.absolute() / "t")) > _MAX_TEMP_CHARS:
        return Path(tempfile.mkdtemp(prefix="gpuyard-ray-"))
    if root.is_symlink():
        root.unlink()
    elif root.exists():
        shutil.rmtree(root)
    root.mkdir(mode=0o700)
    os.chmod(root, 0o700)  # whatever the umask
    return root


def _start_local_node(gcs_address: str, spec: LocalNodeSpec, index: int, temp_dir: str) -> Any:
    """One more raylet on this machine, on loopback (what `ray.cluster_utils` does)."""
    from ray._private.node import Node
    from ray._private.parameter import RayParams

    params = RayParams(
        gcs_address=gcs_address,
        node_ip_address=LOOPBACK,
        node_name=f"gpuyard-local-{index}",
        temp_dir=temp_dir,
        num_cpus=spec.cpus,
        num_gpus=spec.gpus,
        memory=None if spec.mem_mib is None else spec.mem_mib << 20,
        object_store_memory=_OBJECT_STORE_BYTES,
        include_log_monitor=False,
        node_manager_port=0,
        min_worker_port=0,
        max_worker_port=0,
    )
    params.dashboard_agent_listen_port = None  # a random one, not the head's
    with _environment(dict(spec.env)):  # the raylet's processes inherit it
        return Node(params, head=False, shutdown_at_exit=True, spawn_reaper=True)


@contextmanager
def _environment(extra: dict[str, str]) -> Iterator[None]:
    """`extra` in os.environ while a node's processes start (the server starts nothing else
    meanwhile: its nodes are started before it serves)."""
    saved = {key: os.environ.get(key) for key in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _kill_local_nodes(nodes: list[Any]) -> None:
    for node in nodes:
        try:
            # Gracefully first: a SIGKILLed raylet leaves its dashboard and runtime-env agents
            # running (orphans that ignore SIGTERM).
            node.kill_all_processes(check_alive=False, allow_graceful=True, wait=True)
        except Exception:
            pass


def _take_process_slot() -> None:
    if not _connected.acquire(blocking=False):
        raise RuntimeError("this process already has a Ray connection (Ray allows one)")


def _shutdown_quietly() -> None:
    import ray

    try:
        ray.shutdown()
    except Exception:
        pass
