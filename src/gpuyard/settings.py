"""One typed Settings for the server, from defaults, GPUYARD_* variables and CLI flags.

Standard library only. The defaults the CLI needs first (URL, state dir) are
`gpuyard.locations`'s, which the CLI's start path imports without this module.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from gpuyard.locations import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    DEFAULT_SOCKET,
    DEFAULT_URL,
    SOCKET_OFF,
    TOKEN_FILE,
    is_loopback,
    state_dir_path,
)

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "DEFAULT_URL", "TOKEN_FILE", "Settings",
           "database_url", "default_state_dir", "has_password", "masked_url",
           "with_password_file"]  # fmt: skip


def default_state_dir() -> Path:
    """`GPUYARD_STATE_DIR`, else `/var/lib/gpuyard` for root, else `~/.local/share/gpuyard`
    (XDG data home): `locations.state_dir_path`."""
    return Path(state_dir_path())


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything the server is configured with; built once, passed explicitly."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    state_dir: Path = field(default_factory=default_state_dir)
    gpus: str = "auto"
    cpus: int | None = None  # None: this machine's CPU count
    mem_mib: int | None = None  # None: this machine's memory
    declared_gpu_mem_mib: int | None = None
    # `--db`: a SQLite file's path or URL, or postgresql://user@host:port/db (None: SQLite
    # in the state dir). Kept out of repr: a URL may carry a password (`masked_url`).
    database_url: str | None = field(default=None, repr=False)
    # `--db-password-file` (GPUYARD_DB_PASSWORD_FILE): the PostgreSQL password, read from a
    # file only the server's user may read, never on a command line (`ps` shows those to all).
    db_password_file: str | None = None
    # `--standby`: when another server holds the database, wait for it to go (polling every
    # second) and then take over, instead of refusing to start.
    standby: bool = False
    kill_grace_s: float = 10.0
    tick_s: float = 1.0
    policy: str = "default"  # a name from gpuyard.scheduling.policies (oracles refused)
    # Whether a job that said neither --preemptible nor --no-preempt may be preempted. Off:
    # a job that does not checkpoint would lose its work (an admin whose users' jobs all
    # checkpoint turns it on; the scheduler then shortens queues by preempting long jobs).
    preemptible_default: bool = False
    # Fair share: past GPU usage counts half after this long (Slurm's PriorityDecayHalfLife);
    # `fairshare` ranks by it and `gpuyard share` shows it.
    fair_share_half_life_s: float = 7 * 86400.0
    telemetry_s: float = 1.0  # GPU sampling interval; 0 turns telemetry off
    # A free GPU with more than this many MiB used by processes no job owns gets no new job.
    foreign_mem_mib: int = 256
    hot_temp_c: int = 85  # a GPU this hot (or throttled) is placed last and flagged
    # A running job whose GPUs all stay below idle_util_pct for idle_after_s is flagged idle;
    # with idle_cancel_s > 0 it is cancelled that much later (a warning period). 0: never.
    idle_util_pct: float = 5.0
    idle_after_s: float = 1800.0
    idle_cancel_s: float = 0.0
    # Where jobs run: "local" (this machine, supervisors) or "ray" (a Ray cluster: an existing
    # one at ray_address with its token, else a loopback-only one the server starts, of
    # ray_local_nodes "NxG[xC]": N nodes of G GPUs (and C CPUs) on this machine; default one
    # node of what Ray detects). ray_node_timeout_s: how long a silent node stays alive to Ray.
    backend: str = "local"
    ray_address: str | None = None
    ray_token_file: str | None = None
    ray_local_nodes: str | None = None
    ray_node_timeout_s: float | None = None
    # A machine of the cluster that is away when the server starts (known from an earlier
    # start, `machines.json` in the state dir) is waited for this long, its GPUs out of
    # service and its jobs still RUNNING, before they end NODE_FAIL (Slurm's SlurmdTimeout).
    machine_grace_s: float = 300.0
    # HTTP: a client must send a request's headers within this (idle or slow connections
    # would hold file descriptors for ever), and at most this many connections are open.
    header_timeout_s: float = 10.0
    max_connections: int = 2048
    # No account holds more than max_connections_per_user of them (streams are connections:
    # the change feed, `logs -f`), and the last reserved_connections serve only admins and
    # /healthz: one user's streams cannot take the API from everyone else. 0: no per-user cap.
    max_connections_per_user: int = 256
    reserved_connections: int = 64
    # A bind beyond loopback must be asked for (`--allow-remote`): the API is plain HTTP, and
    # TLS belongs in front (a reverse proxy). public_names: the names clients reach the server
    # by (a proxy's `gpu.lab.org`), accepted in Host and Origin besides its own address.
    allow_remote: bool = False
    public_names: tuple[str, ...] = ()
    # A server run as root runs each job as its owner's Unix user; a job of an account that
    # would run as root (other than the server's own user's, its admin) is refused unless this.
    allow_root_jobs: bool = False
    # A root server's own account (root) may not log in to the web dashboard unless this: a
    # browser session is the easiest credential to lose; admins use an admin account there.
    allow_root_dashboard: bool = False
    # Every job's process and thread limit (its cgroup's pids.max; 0: none): a fork bomb stops
    # there, not at the machine's.
    job_pids_max: int = 16384
    # Memory for every job: one without --mem gets def_mem_per_cpu_mib for each CPU it asks
    # (Slurm's DefMemPerCPU; 0: the machine's memory less jobs_mem_reserve_mib, over its
    # CPUs; -1: none). All jobs together are held below the server's memory (its group's
    # limit, else the machine's) less jobs_mem_reserve_mib (0: a tenth, 512 MiB to 4 GiB), so
    # an OOM kill takes a job, never the server. jobs_pids_max, user_pids_max: processes of
    # all jobs, and of one user's jobs, together (0: 3/4 and 1/2 of the kernel's pid_max).
    def_mem_per_cpu_mib: int = 0
    jobs_mem_reserve_mib: int = 0
    jobs_pids_max: int = 0
    user_pids_max: int = 0
    # Disk: a job's log (all its runs) may grow to job_log_max_mib, all of one user's jobs'
    # logs to user_log_max_mib (0: no budget); past it the log gets one line and the rest of
    # the run's output is cut. No log takes the last state_disk_reserve_mib of the state disk
    # (-1: a twentieth, at most 256 MiB; none under 64 MiB), so cancels, ends and new users'
    # registrations always land.
    job_log_max_mib: int = 4096
    user_log_max_mib: int = 16384
    state_disk_reserve_mib: int = -1
    # Per-job cgroups where the kernel allows them (--mem, --cpus, pids, GPU devices held by
    # the kernel). Off: limits advisory, and no cgroup migration in a job's start (on v1, the
    # first start after an idle spell waits for an RCU grace period: ~4-13 ms here).
    job_cgroups: bool = True
    # A server run as root also listens on this Unix socket (world-connectable, in a 0755
    # folder outside the state dir) and takes each caller's identity from the kernel: local
    # users need no token. None: the default (DEFAULT_SOCKET) when root, none otherwise; "off":
    # none. register_local_users: a local user without an account gets one on first use (role
    # user, default team); off, an admin adds each (`gpuyard admin user add`).
    socket: str | None = None
    register_local_users: bool = True
    # `submit --retries N`: retry n waits retry_backoff_s * 2^(n-1), at most
    # retry_backoff_max_s. A job whose GPU or machine failed (NODE_FAIL) is requeued up to
    # node_fail_requeues times, then held with the reason (0: it ends NODE_FAIL at once).
    retry_backoff_s: float = 10.0
    retry_backoff_max_s: float = 600.0
    node_fail_requeues: int = 3
    # Services (`gpuyard serve`): restart n of short runs in a row waits service_backoff_s *
    # 2^(n-1), at most service_backoff_max_s; a run of service_healthy_s starts the count
    # over. The health check asks every service_check_s; service_check_failures failures in a
    # row past a service's grace period restart it.
    service_backoff_s: float = 2.0
    service_backoff_max_s: float = 300.0
    service_healthy_s: float = 300.0
    service_check_s: float = 3.0
    service_check_failures: int = 3
    # Webhooks (`--notify`, `gpuyard notify`): the hosts the server may POST to (a comma list
    # of loopback, private, public, addresses or networks, host names, .domains; "none": no
    # webhooks; "": private,public, so never loopback or link-local: `domain/webhooks.py`
    # UrlPolicy says why), and the first retry's wait (doubled at each of the 5 tries).
    notify_allow: str = ""
    notify_retry_s: float = 40.0

    @classmethod
    def from_env(cls, **overrides: object) -> Settings:
        """Defaults, then GPUYARD_* variables, then explicit overrides (None = not given)."""
        env = os.environ
        values: dict[str, object] = {}
        for name, cast in (
            ("host", str), ("port", int), ("gpus", str), ("cpus", int),
            ("database_url", str), ("db_password_file", str),
            ("kill_grace_s", float), ("tick_s", float),
            ("policy", str), ("telemetry_s", float), ("foreign_mem_mib", int), ("hot_temp_c", int),
            ("idle_util_pct", float), ("idle_after_s", float), ("idle_cancel_s", float),
            ("backend", str), ("ray_address", str), ("ray_token_file", str),
            ("ray_local_nodes", str), ("ray_node_timeout_s", float), ("machine_grace_s", float),
            ("header_timeout_s", float), ("max_connections", int),
            ("max_connections_per_user", int), ("reserved_connections", int),
            ("allow_remote", _flag), ("public_names", _names),
            ("preemptible_default", _flag), ("allow_root_jobs", _flag),
            ("allow_root_dashboard", _flag), ("job_pids_max", int),
            ("job_cgroups", _flag), ("def_mem_per_cpu_mib", int), ("jobs_mem_reserve_mib", int),
            ("jobs_pids_max", int), ("user_pids_max", int), ("job_log_max_mib", int),
            ("user_log_max_mib", int), ("state_disk_reserve_mib", int),
            ("fair_share_half_life_s", float),
            ("retry_backoff_s", float), ("retry_backoff_max_s", float),
            ("node_fail_requeues", int),
            ("service_backoff_s", float), ("service_backoff_max_s", float),
            ("service_healthy_s", float), ("service_check_s", float),
            ("service_check_failures", int),
            ("notify_allow", str), ("notify_retry_s", float),
            ("socket", str), ("register_local_users", _flag), ("standby", _flag),
        ):  # fmt: skip
            raw = env.get(f"GPUYARD_{name.upper()}")
            if raw:
                try:
                    values[name] = cast(raw)
                except ValueError:
                    kind = "boolean (1/0, true/false)" if cast is _flag else cast.__name__
                    raise ValueError(
                        f"GPUYARD_{name.upper()}={raw!r} is not a valid {kind}"
                    ) from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        if "state_dir" in values:
            values["state_dir"] = Path(str(values["state_dir"])).expanduser()
        if values.get("database_url"):
            values["database_url"] = database_url(str(values["database_url"]))
        if values.get("db_password_file"):
            values["database_url"] = with_password_file(
                values.get("database_url"), Path(str(values["db_password_file"])).expanduser()
            )
        settings = cls(**values)  # type: ignore[arg-type]
        if not 1 <= settings.port <= 65535:
            raise ValueError(f"port {settings.port} is out of range: use 1-65535")
        if not settings.allow_remote and not is_loopback(settings.host):
            raise ValueError(
                f"--host {settings.host} would take requests from other machines over plain "
                "HTTP: add --allow-remote (and put TLS in front, e.g. a reverse proxy), or keep "
                "the default 127.0.0.1"
            )
        if settings.backend not in ("local", "ray"):
            raise ValueError(f"backend {settings.backend!r}: use local or ray")
        if settings.tick_s < 0.05:
            raise ValueError(f"tick of {settings.tick_s} s is too short: use at least 0.05")
        if not 0 <= settings.retry_backoff_s <= settings.retry_backoff_max_s:
            raise ValueError(
                f"retry backoff {settings.retry_backoff_s} s (at most "
                f"{settings.retry_backoff_max_s} s): give 0 or more, and a maximum not below it"
            )
        if not 0.05 <= settings.service_check_s <= 3600 or settings.service_check_failures < 1:
            raise ValueError(
                f"service health checks every {settings.service_check_s} s, "
                f"{settings.service_check_failures} failures: use 0.05-3600 s and 1 or more"
            )
        if settings.node_fail_requeues < 0:
            raise ValueError(
                f"node_fail_requeues {settings.node_fail_requeues}: give 0 (never) or more"
            )
        if settings.telemetry_s != 0 and not 0.1 <= settings.telemetry_s <= 3600:
            raise ValueError(
                f"GPU telemetry every {settings.telemetry_s} s: use 0.1-3600 s, or 0 for off"
            )
        return settings

    @property
    def socket_path(self) -> str | None:
        """Where this server listens for local users: only a root server (a socket of a
        server run by a normal user would give its callers that user's powers); None: none."""
        if self.socket is not None and self.socket.strip().lower() in SOCKET_OFF:
            return None
        if os.geteuid() != 0:
            return None
        return os.path.expanduser(self.socket) if self.socket else DEFAULT_SOCKET

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def token_path(self) -> Path:
        return self.state_dir / TOKEN_FILE


_DATABASE_SCHEMES = ("sqlite", "postgresql", "postgres")


def database_url(text: str) -> str:
    """`--db` as a URL SQLAlchemy takes: a URL as given (sqlite:///..., postgresql://...;
    `postgres://`, as libpq and many hosting services write it, is postgresql://), or the
    path of a SQLite file (relative to where the server starts)."""
    text = text.strip()
    scheme, sep, rest = text.partition("://")
    if not sep:
        return f"sqlite:///{Path(text).expanduser().absolute()}"
    family = scheme.lower().partition("+")[0]
    if family not in _DATABASE_SCHEMES:
        raise ValueError(
            f"--db {masked_url(text)}: use a SQLite file's path or "
            "postgresql://USER@HOST:PORT/DATABASE"
        )
    if family == "postgres":
        return f"postgresql{scheme[len(family) :]}://{rest}"
    return text


def with_password_file(url: object, path: Path) -> str:
    """A PostgreSQL `url` with the password kept in the file `path` (its first line), which
    other users may not read; ValueError in one line otherwise."""
    from urllib.parse import quote

    where = f"--db-password-file {path}"
    if not isinstance(url, str) or not url.startswith("postgresql"):
        raise ValueError(f"{where}: give a PostgreSQL --db URL too (postgresql://USER@HOST/DB)")
    try:
        mode = path.stat().st_mode
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or exc
        raise ValueError(f"{where} cannot be read: {why}") from None
    if mode & 0o004:
        raise ValueError(f"{where} may be read by every user: `chmod o-r {path}` (or 600)")
    if not lines or not lines[0]:
        raise ValueError(f"{where} is empty: put the password on its first line")
    scheme, _, rest = url.partition("://")
    netloc, slash, tail = rest.partition("/")
    userinfo, at, host = netloc.rpartition("@")
    if not at:
        raise ValueError(f"{where}: the --db URL names no user (postgresql://USER@HOST/DB)")
    user = userinfo.partition(":")[0]
    return f"{scheme}://{user}:{quote(lines[0], safe='')}@{host}{slash}{tail}"


def has_password(url: str) -> bool:
    """Whether a database URL carries a password (what `ps` would show every user)."""
    return masked_url(url) != url


def masked_url(url: str) -> str:
    """`url` with its password as `***` (in the user part or a `password=` parameter): what
    logs, banners and errors may show."""
    import re

    url = re.sub(r"([?&]password=)[^&]*", r"\1***", url, flags=re.IGNORECASE)
    scheme, sep, rest = url.partition("://")
    netloc, slash, tail = rest.partition("/")
    userinfo, at, host = netloc.rpartition("@")
    if not sep or not at or ":" not in userinfo:
        return url
    user = userinfo.partition(":")[0]
    return f"{scheme}://{user}:***@{host}{slash}{tail}"


def _names(text: str) -> tuple[str, ...]:
    """A comma-separated list of names (GPUYARD_PUBLIC_NAMES=gpu.lab.org,gpu)."""
    return tuple(name.strip() for name in text.split(",") if name.strip())


def _flag(text: str) -> bool:
    """A boolean variable as people write it; anything else is an error, not False."""
    word = text.strip().lower()
    if word in ("1", "true", "yes", "on"):
        return True
    if word in ("0", "false", "no", "off"):
        return False
    raise ValueError(text)
