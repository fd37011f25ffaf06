"""The composition root: the one place that wires adapters into services.

    core.py        `build_core`: the decision path over the stores (also the tests' rigs)
    server.py      `build_server` (a whole server for its settings), `build_app` (the HTTP API)
    store.py       the database: which, opened under the one-server lock, a standby's wait
    state_dir.py   the state dir's safety and the API token in it
    ray_wiring.py  the Ray backend: connection, inventory, executor, the node watch
    logs.py        one-line log records
    serving.py     `gpuyard server`: sockets, start, serve, close

The names below are what the CLI and the tests use.
"""

from gpuyard.bootstrap.core import METRICS_TOKEN_FILE, Core, build_core
from gpuyard.bootstrap.logs import OneLineFormatter, configure_logging
from gpuyard.bootstrap.server import build_app, build_server
from gpuyard.bootstrap.serving import serve
from gpuyard.bootstrap.state_dir import ensure_token
from gpuyard.bootstrap.store import open_store

__all__ = [
    "METRICS_TOKEN_FILE", "Core", "OneLineFormatter", "build_app", "build_core", "build_server",
    "configure_logging", "ensure_token", "open_store", "serve",
]  # fmt: skip
