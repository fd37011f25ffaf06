"""`gpuyard server`: bind the TCP port and the Unix socket safely, start the server, serve
until a signal, close."""

from __future__ import annotations

import errno
import gc
import logging
import os
import socket
import stat
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from gpuyard.adapters.store.sql import SqlJobStore
from gpuyard.bootstrap.core import METRICS_TOKEN_FILE
from gpuyard.bootstrap.server import build_app
from gpuyard.bootstrap.state_dir import refuse_foreign, writable_state_dir
from gpuyard.bootstrap.store import database_of, describe_database, open_store
from gpuyard.domain.errors import Unavailable
from gpuyard.locations import is_loopback
from gpuyard.scheduling.policies import make_policy
from gpuyard.services.store_hold import Fenced, HoldOutcome
from gpuyard.settings import Settings

if TYPE_CHECKING:
    from fastapi import FastAPI

    from gpuyard.services.server import ServerFacade

# How long a standby that took the database waits for the old server to let go of the port
# and the socket (it exits within a few seconds of losing its session), and how often it asks.
STANDBY_BIND_WAIT_S = 30.0
BIND_RETRY_S = 0.2


def serve(settings: Settings) -> None:
    """`gpuyard server`: bind first (a wrong name or a taken port is one line, before anything
    is built), build the server and its API, then listen and serve in the foreground."""
    from gpuyard.api.http_server import serve as serve_http

    make_policy(settings.policy, for_server=True)  # a wrong name: one line, before binding
    # Everything the server creates is its own alone (database, logs, launch files); jobs
    # run as the server's user get back the umask it was started with.
    job_umask = os.umask(0o077)
    store: SqlJobStore | None = None
    if settings.standby:
        # A standby binds only once it holds the database: the server it replaces may be
        # on this machine, on the same port and socket, until it dies.
        writable_state_dir(settings.state_dir)
        # It may wait for days, each try's error a little cyclic garbage (an exception and
        # its frames): collected as usual meanwhile (`run_server` turned the collector off
        # for the start).
        gc.enable()
        try:
            store = open_store(settings)
        finally:
            gc.disable()
    try:
        sock = _bind(settings.host, settings.port, STANDBY_BIND_WAIT_S if settings.standby else 0)
    except BaseException:
        if store is not None:
            store.close()
        raise
    path = settings.socket_path
    try:
        local = _bind_local(settings, path) if path else None
    except BaseException:
        sock.close()
        if store is not None:
            store.close()
        raise
    socks = [sock] if local is None else [sock, local]
    inode = os.lstat(path).st_ino if local is not None and path is not None else None
    handover = _Handover()
    try:
        server, app = _build(settings, job_umask, store, handover)
    except BaseException:
        for each in socks:
            each.close()
        if inode is not None and path is not None:
            _unlink_own_socket(path, inode)
        raise
    for each in socks:  # only now: a client that connects finds the token and a ready server
        each.listen(1024)
    for line in (
        f"gpuyard server listening on {settings.url}",
        f"  state dir: {settings.state_dir}",
        f"  database:  {describe_database(database_of(settings))}",
        f"  GPUs:      {server.gpus.inventory.source}",
        f"  policy:    {settings.policy}",
        f"  job limits: {server.info.confinement}",
        f"  API token: {settings.token_path} (the CLI on this machine finds it)",
        f"  metrics:   {settings.state_dir / METRICS_TOKEN_FILE} (GET /metrics only)",
        *_local_line(settings, local),
        *_remote_warning(settings),
    ):
        print(line, flush=True)
    try:
        while True:
            serve_http(
                app, socks, header_timeout_s=settings.header_timeout_s,
                max_connections=settings.max_connections,
                reserved_connections=settings.reserved_connections,
                max_connections_per_peer=settings.max_connections_per_user,
                stop=handover.stop,
            )  # fmt: skip
            # The app closed its server on the way out (its lifespan). A signal: done. A lost
            # hold on the database: taken back, the server is built again on the new store and
            # reloads from it as a restart does, on the same sockets; held by another: exit.
            outcome = handover.take()
            if outcome is None:
                return
            if isinstance(outcome, Fenced):
                raise Unavailable(outcome.message)
            assert isinstance(outcome.store, SqlJobStore)
            server, app = _build(settings, job_umask, outcome.store, handover)
            print(
                f"gpuyard server took its database back after {outcome.lost_for_s:.1f} s"
                f" and reloaded it: serving again on {settings.url}",
                flush=True,
            )
    finally:
        if inode is not None and path is not None:
            _unlink_own_socket(path, inode)


def _build(
    settings: Settings, job_umask: int, store: SqlJobStore | None, handover: _Handover
) -> tuple[ServerFacade, FastAPI]:
    """The server and its app (at the start, and again on a database taken back). The build
    makes long-lived objects only (the book's jobs, the policy's replayed history): the cyclic
    collector, run every 700 allocations, would scan them again and again for nothing (a third
    of the rebuild's time with 10,000 pending and 20,000 jobs of history: bench/history.py
    --pending 10000), so it is off meanwhile. Then what the build made (modules, jobs,
    history) is moved out of its reach, so that a full collection no longer scans it all
    inside a pass or a submit (bench/dependency_chain.py: the chain's worst link 84-102 ms
    with it scanned, 14-24 ms frozen); refcounting still frees it."""
    gc.disable()
    try:
        built = build_app(settings, job_umask, store, handover.put)
        gc.freeze()
        return built
    finally:
        gc.enable()


class _Handover:
    """What the store's hold watch hands the serving loop (`StoreHold`): the outcome, and the
    event that stops the current app's HTTP server so that the loop acts on it."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self._outcome: HoldOutcome | None = None

    def put(self, outcome: HoldOutcome) -> None:
        self._outcome = outcome
        self.stop.set()

    def take(self) -> HoldOutcome | None:
        """The outcome handed over (None: the HTTP server stopped for a signal), and a new
        event for the next app."""
        outcome, self._outcome = self._outcome, None
        self.stop = threading.Event()
        return outcome


def _local_line(settings: Settings, local: socket.socket | None) -> list[str]:
    """The start banner's line on the Unix socket: where local users reach the server."""
    if local is None:
        return []
    who = (
        "a new local user gets an account on first use"
        if settings.register_local_users
        else "local users need an account (`gpuyard admin user add`)"
    )
    return [f"  local users: {settings.socket_path} (no token: the kernel says who; {who})"]


def bind_unix(path: str, *, explicit: bool) -> socket.socket | None:
    """The root server's Unix socket for local users, bound (not yet listening): mode 0666
    (anyone may connect: the kernel says who they are) in a folder only root may write (0755:
    nobody can put another socket in its place). A stale socket (nobody listening) is
    replaced; one a running server holds is an error when asked for (`--socket`), a warning
    for the default (the server then serves TCP only)."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        os.makedirs(folder, mode=0o755)
        os.chmod(folder, 0o755)  # the server's umask is 077: made 0700 otherwise
    refuse_foreign(Path(folder), "socket folder")
    if os.path.lexists(path):
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            raise Unavailable(f"{path} exists and is not a socket: remove it, or pick --socket")
        if not _listened_on(path):
            os.unlink(path)  # stale: its server is gone
        else:
            if explicit:
                raise Unavailable(
                    f"another server listens on {path}: stop it, or pick another --socket"
                )
            logging.getLogger("gpuyard.server").warning(
                "another server listens on %s: local users reach that one", path
            )
            return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        os.chmod(path, 0o666)
    except OSError as exc:
        sock.close()
        raise Unavailable(
            f"cannot listen on {path} ({exc.strerror}): pick another --socket, or --socket off"
        ) from None
    sock.set_inheritable(False)
    return sock


def _unlink_own_socket(path: str, inode: int) -> None:
    """Remove the socket file at close if it is still this server's (not a newer one's)."""
    try:
        if os.lstat(path).st_ino == inode:
            os.unlink(path)
    except OSError:
        pass


def _remote_warning(settings: Settings) -> list[str]:
    """What a server reachable from other machines says first: its API is plain HTTP."""
    if is_loopback(settings.host):
        return []
    return [
        f"WARNING: listening on {settings.host} (--allow-remote): other machines can reach this "
        "server over plain HTTP, so tokens cross the network readable; put TLS in front (a "
        "reverse proxy such as Caddy or nginx on 127.0.0.1, clients on https://)",
    ]


def _bind(host: str, port: int, wait_s: float = 0) -> socket.socket:
    """The TCP socket, bound. A port in use is one line at once; a standby that holds the
    database waits up to `wait_s` for it: the server it replaces may still be on its way
    out on this machine (it lost its database session and exits once it sees the database
    is this one's: `services/store_hold.py`)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    deadline = time.monotonic() + wait_s
    said = False
    while True:
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE and time.monotonic() < deadline:
                if not said:
                    print(
                        f"standby: {host}:{port} is still the old server's; waiting up to"
                        f" {wait_s:g} s for it to exit",
                        flush=True,
                    )
                    said = True
                time.sleep(BIND_RETRY_S)
                continue
            raise Unavailable(
                f"cannot listen on {host}:{port} ({exc.strerror}); is another server running? "
                "pick another --port"
            ) from None
        sock.set_inheritable(False)
        return sock


def _bind_local(settings: Settings, path: str) -> socket.socket | None:
    """The Unix socket; a standby waits (as for its port) while the old server still
    listens on it, so that local users reach the new server, not nobody."""
    deadline = time.monotonic() + (STANDBY_BIND_WAIT_S if settings.standby else 0)
    while settings.standby and time.monotonic() < deadline and _listened_on(path):
        time.sleep(BIND_RETRY_S)
    return bind_unix(path, explicit=settings.socket is not None)


def _listened_on(path: str) -> bool:
    """Whether a server answers on the Unix socket at `path` (refused or gone: no; any other
    error is raised, not taken for either)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    finally:
        probe.close()
    return True
