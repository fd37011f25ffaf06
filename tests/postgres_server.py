"""A throw-away PostgreSQL server for the tests: Debian's binaries, a temporary data dir,
bound to loopback on a free port, with the durability settings of a real deployment (fsync and
synchronous_commit on), since the benchmarks measure durable submits on it.

`initdb` and `postgres` refuse to run as root, so as root the cluster belongs to the `postgres`
Unix user that Debian's package creates; as anyone else, to that user. Authentication is
`trust` on loopback only: the server is reachable from this machine alone, for one test run.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import psycopg
from psycopg import sql

SUPERUSER = "postgres"
_OWNER = "postgres"  # the Unix user that runs the cluster when the tests run as root


def find_bin_dir() -> Path | None:
    """Debian's server binaries (`/usr/lib/postgresql/<major>/bin`), the newest major; None
    when the postgresql package is not installed."""
    found = [p.parent for p in Path("/usr/lib/postgresql").glob("*/bin/initdb")]
    if not found:
        return None
    return max(found, key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PostgresServer:
    """One cluster in a temporary folder; `start()` it, `create_database(name)` for a URL
    SqlJobStore takes, `stop()` to stop it and remove its folder."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.port = 0
        self.root: Path | None = None
        self._uid: int | None = None  # as root: the Unix user the cluster runs as
        self._gid: int | None = None

    @property
    def admin_url(self) -> str:
        """The superuser's URL on the maintenance database (psycopg's libpq form)."""
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/postgres"

    def url(self, database: str) -> str:
        """SQLAlchemy's URL of `database` on this server, through psycopg 3."""
        return f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        self._uid, self._gid = _cluster_user()
        self.root = Path(tempfile.mkdtemp(prefix="gpuyard-pg-", dir=_parent_dir(self._uid)))
        try:
            if self._uid is not None and self._gid is not None:
                os.chown(self.root, self._uid, self._gid)
            self._pg("initdb", "-D", str(self.data), "-U", SUPERUSER, "--auth=trust",
                     "--encoding=UTF8", "--locale=C.UTF-8",
                     "--no-sync")  # fmt: skip  # the cluster's files; the server runs with fsync
            self._start_on_a_free_port()
        except BaseException:
            self._remove()
            raise

    @property
    def data(self) -> Path:
        assert self.root is not None, "start() first"
        return self.root / "data"

    def create_database(self, name: str, template: str | None = None) -> str:
        """An empty database named `name` (dropped first if it exists), or a copy of the
        database `template` (which nobody may be connected to); its SQLAlchemy URL."""
        create = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template is not None:
            create += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
        self.drop_database(name)
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(create)
        return self.url(name)

    def drop_database(self, name: str) -> None:
        """Drop `name` if it exists, ending any session still on it."""
        drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(drop)

    def stop(self) -> None:
        """Stop the cluster (fast: sessions are ended) and remove its folder."""
        if self.root is None:
            return
        if (self.data / "postmaster.pid").exists():
            self._pg("pg_ctl", "stop", "-D", str(self.data), "-m", "fast", "-w", check=False)
        self._remove()

    def stop_keeping_data(self) -> None:
        """`pg_ctl stop -m fast` as an operator's restart does: sessions ended, data kept,
        the port given up until `start_again()`."""
        self._pg("pg_ctl", "stop", "-D", str(self.data), "-m", "fast", "-w")

    def start_again(self) -> None:
        """Start the stopped cluster on the port it had (so its URLs stay true)."""
        assert self.root is not None
        done = self._pg("pg_ctl", "start", "-D", str(self.data), "-l",
                        str(self.root / "server.log"), "-w", "-t", "60", "-o",
                        self._options(), check=False)  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"PostgreSQL did not start again: {done.stdout}{done.stderr}")

    def _options(self) -> str:
        assert self.root is not None
        return (f"-c listen_addresses=127.0.0.1 -c port={self.port}"
                f" -c unix_socket_directories={self.root}"
                " -c fsync=on -c synchronous_commit=on -c max_connections=200")  # fmt: skip

    def _start_on_a_free_port(self) -> None:
        """Start on a free port; another process may take the port between its pick and the
        server's bind, so a failed start is retried on a new one."""
        assert self.root is not None
        log = self.root / "server.log"
        for _ in range(5):
            self.port = free_port()
            options = self._options()
            done = self._pg("pg_ctl", "start", "-D", str(self.data), "-l", str(log), "-w",
                            "-t", "60", "-o", options, check=False)  # fmt: skip
            if done.returncode == 0:
                return
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        raise RuntimeError(f"PostgreSQL did not start: {done.stdout}{done.stderr}\n{tail}")

    def _pg(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8", "HOME": str(self.root)}
        done = subprocess.run(
            [str(self.bin_dir / tool), *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=self.root,
            stdin=subprocess.DEVNULL,
            timeout=120,
            user=self._uid,
            group=self._gid,
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stdout}{done.stderr}")
        return done

    def _remove(self) -> None:
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None


def _cluster_user() -> tuple[int | None, int | None]:
    """As root, the uid and gid to run the cluster as (initdb refuses root); else none."""
    if os.geteuid() != 0:
        return None, None
    try:
        entry = pwd.getpwnam(_OWNER)
    except KeyError:
        raise RuntimeError(
            f"no '{_OWNER}' Unix user to run PostgreSQL as (Debian's postgresql package"
            " creates it): install postgresql"
        ) from None
    return entry.pw_uid, entry.pw_gid


def _parent_dir(cluster_uid: int | None) -> str | None:
    """Where to make the cluster's folder: the usual temporary dir, unless the `postgres`
    user could not reach it (a TMPDIR under /root) or its path is too long for the server's
    Unix socket (107 bytes in all): then /tmp."""
    usual = Path(tempfile.gettempdir()).resolve()
    reachable = cluster_uid is None or all(
        os.stat(p).st_mode & 0o001 for p in (usual, *usual.parents)
    )
    return None if reachable and len(str(usual)) <= 60 else "/tmp"
