"""What `gpuyard node join` runs: Ray's own join (`ray start --address=... --block`), with the
cluster token, the agent's folder and the machine's name, and the checks made before it.

Kept apart from typer (`node_cmd.py`) so the command line, the environment and the systemd
unit it builds are plain values a test can read. The `ray` run is the one next to the running
Python: the raylet's workers run that Python, and the machine's agent (a Ray actor gpuyard
starts there) needs this same gpuyard importable in it.
"""

from __future__ import annotations

import os
import shlex
import socket
import stat
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_TOKEN_FILE = "/etc/gpuyard/ray-token"
DEFAULT_AGENT_DIR = "/var/lib/gpuyard-agent"
AGENT_DIR_VAR = "GPUYARD_AGENT_DIR"  # read by the agent (`adapters/agent/machine.py`)
REACH_TIMEOUT_S = 5.0


class JoinRefused(Exception):
    """A check before the join failed: its message is the one line to show."""


@dataclass(frozen=True)
class JoinRequest:
    """The options of one `gpuyard node join`, defaults resolved."""

    address: str
    node_name: str
    token_file: str = DEFAULT_TOKEN_FILE
    agent_dir: str = DEFAULT_AGENT_DIR
    node_ip: str | None = None
    num_gpus: int | None = None
    num_cpus: int | None = None
    memory_mib: int | None = None
    extra_env: Mapping[str, str] = field(default_factory=dict)
    ray_options: Sequence[str] = ()  # passed to `ray start` as they are (fixed ports)


def short_hostname() -> str:
    """This machine's name up to its first dot: its default name in `gpuyard nodes`."""
    return socket.gethostname().split(".", 1)[0]


def ray_executable() -> Path:
    """The `ray` of the running Python's install (not PATH's: another Python's ray would run
    workers that cannot import this gpuyard)."""
    return Path(sys.executable).parent / "ray"


def gpuyard_executable() -> str:
    """The `gpuyard` of the running Python's install, for the unit's ExecStart."""
    beside = Path(sys.executable).parent / "gpuyard"
    return str(beside) if beside.exists() else str(Path(sys.argv[0]).absolute())


def parse_env(pairs: Sequence[str]) -> dict[str, str]:
    """`--env KEY=VALUE` items; a malformed one is refused in one line."""
    found = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key or not key.replace("_", "a").isalnum() or key[0].isdigit():
            raise JoinRefused(f"--env {pair!r}: give KEY=VALUE (e.g. --env LD_LIBRARY_PATH=/x)")
        found[key] = value
    return found


def split_address(address: str) -> tuple[str, int]:
    """`HOST:PORT` (an IPv6 host in brackets) as the GCS address Ray's `--address` takes."""
    host, sep, port = address.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise JoinRefused(
            f"{address!r} is not a Ray head's address: give HOST:PORT, e.g. 10.0.0.1:6379"
        )
    return host, int(port)


def ray_argv(request: JoinRequest, ray: Path | None = None) -> list[str]:
    """`ray start` joining the cluster, in the foreground (`--block`: a signal to it stops its
    raylet and the raylet's processes; a systemd unit can supervise it)."""
    argv = [
        str(ray or ray_executable()), "start", f"--address={request.address}", "--block",
        "--disable-usage-stats", f"--node-name={request.node_name}",
        f"--temp-dir={ray_temp_dir(request)}",
    ]  # fmt: skip
    if request.node_ip:
        argv.append(f"--node-ip-address={request.node_ip}")
    if request.num_gpus is not None:
        argv.append(f"--num-gpus={request.num_gpus}")
    if request.num_cpus is not None:
        argv.append(f"--num-cpus={request.num_cpus}")
    if request.memory_mib is not None:
        argv.append(f"--memory={request.memory_mib * 2**20}")  # Ray's --memory is in bytes
    return argv + list(request.ray_options)


def ray_temp_dir(request: JoinRequest) -> Path:
    """Ray's session folder (sockets, logs) on this machine: root's own, under the agent's
    folder, never Ray's world-writable /tmp/ray."""
    return Path(request.agent_dir).absolute() / "ray"


def ray_env(request: JoinRequest, base: Mapping[str, str]) -> dict[str, str]:
    """`base` with the cluster token (by its file: a token in the environment would show in
    /proc to root only, but also reach every worker), the agent's folder, then `--env`."""
    env = {k: v for k, v in base.items() if k != "RAY_AUTH_TOKEN"}
    env.update(
        RAY_AUTH_MODE="token",
        RAY_AUTH_TOKEN_PATH=str(Path(request.token_file).absolute()),
        **{AGENT_DIR_VAR: str(Path(request.agent_dir).absolute())},
    )
    env.update(request.extra_env)
    return env


def join_argv(request: JoinRequest) -> list[str]:
    """The `gpuyard node join ...` command line that makes `request` again (for the unit)."""
    argv = [
        gpuyard_executable(), "node", "join", request.address, "--node-name", request.node_name,
        "--token-file", request.token_file, "--agent-dir", request.agent_dir,
    ]  # fmt: skip
    if request.node_ip:
        argv += ["--node-ip-address", request.node_ip]
    if request.num_gpus is not None:
        argv += ["--num-gpus", str(request.num_gpus)]
    if request.num_cpus is not None:
        argv += ["--num-cpus", str(request.num_cpus)]
    if request.memory_mib is not None:
        argv += ["--memory", f"{request.memory_mib}M"]
    for key, value in request.extra_env.items():
        argv += ["--env", f"{key}={value}"]
    return argv + [f"--ray-option={option}" for option in request.ray_options]


def _systemd_quote(arg: str) -> str:
    """One ExecStart word: shell-style quotes (systemd reads them), `$` and `%` escaped (systemd
    would expand them as variables and specifiers)."""
    return shlex.quote(arg).replace("%", "%%").replace("$", "$$")


def systemd_unit(request: JoinRequest) -> str:
    """`gpuyard-node.service`: this join, restarted whenever it ends. As the server's unit:
    only the main process is signalled on stop (jobs run under their own supervisors and
    outlive it) and the cgroup is delegated (the agent makes per-job groups under its own)."""
    exec_start = " ".join(_systemd_quote(a) for a in join_argv(request))
    return f"""\
# /etc/systemd/system/gpuyard-node.service: this machine in the gpuyard Ray cluster at
# {request.address}, as machine {request.node_name!r}.
[Unit]
Description=gpuyard machine {request.node_name} (Ray node of {request.address})
Wants=network-online.target
After=network-online.target

[Service]
Type=simple
User=root
ExecStart={exec_start}
KillMode=process
Delegate=yes
LimitNOFILE=65536
Restart=always
RestartSec=5
# Ray drains the node for up to 30 s on SIGTERM before it stops its raylet.
TimeoutStopSec=60

[Install]
WantedBy=multi-user.target
"""


def check_root(euid: int) -> None:
    if euid != 0:
        raise JoinRefused(
            "gpuyard node join must run as root (the machine's agent runs each job as its "
            "owner's Unix user): sudo gpuyard node join ..."
        )


def check_token_file(path: str) -> None:
    """The cluster token file: there, a regular file, readable, and by its owner only (every
    process of the cluster trusts whoever holds it)."""
    fix = "write the cluster's token there (the head's token file, copied), mode 0600"
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise JoinRefused(f"no cluster token file {path}: {fix} (or give --token-file)") from None
    except OSError as exc:
        raise JoinRefused(f"cannot read the cluster token file {path}: {exc.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise JoinRefused(f"the cluster token file {path} is not a file: {fix}")
    if info.st_mode & 0o077:
        mode = stat.S_IMODE(info.st_mode)
        raise JoinRefused(
            f"the cluster token file {path} is readable by others (mode {mode:04o}): "
            f"chmod 600 {path}"
        )
    try:
        with open(path, "rb") as handle:
            token = handle.read().strip()
    except OSError as exc:
        raise JoinRefused(f"cannot read the cluster token file {path}: {exc.strerror}") from None
    if not token:
        raise JoinRefused(f"the cluster token file {path} is empty: {fix}")


def check_ray(ray: Path) -> None:
    if not os.access(ray, os.X_OK):
        raise JoinRefused(
            f"no Ray beside this gpuyard ({ray}): install 'gpuyard[ray]' in {sys.prefix}"
        )


def check_reachable(address: str, timeout_s: float = REACH_TIMEOUT_S) -> None:
    """A TCP connect to the head's GCS port: a head not started (or a firewall) is one line
    here, not Ray's minute of retries."""
    host, port = split_address(address)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as exc:
        why = exc.strerror or str(exc) or type(exc).__name__
        raise JoinRefused(
            f"cannot reach the Ray head at {address}: {why}; start the head first "
            f"(ray start --head ...) or check the firewall"
        ) from None


def make_agent_dir(path: str) -> None:
    """The agent's folder: root's, 0711 (users reach their own job folders under it, by name
    only); Ray's session folder in it, 0700."""
    folder = Path(path)
    try:
        for made, mode in ((folder, 0o711), (folder / "ray", 0o700)):
            made.mkdir(parents=True, exist_ok=True)
            os.chown(made, 0, 0)
            made.chmod(mode)
    except OSError as exc:
        raise JoinRefused(f"cannot make the agent's folder {path}: {exc.strerror}") from None
