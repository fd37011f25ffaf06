"""`gpuyard server`: bind the socket, build the server, run uvicorn in the foreground."""

from __future__ import annotations

import logging
import socket
import sys

from gpuyard.domain.errors import GpuyardError, Unavailable
from gpuyard.settings import Settings


def run_server(settings: Settings) -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )  # fmt: skip
    logging.getLogger("alembic").setLevel(logging.WARNING)
    from gpuyard.scheduling.policies import make_policy

    make_policy(settings.policy, for_server=True)  # a wrong name: one line, before binding
    sock = _bind(settings.host, settings.port)
    import uvicorn

    from gpuyard.api.app import create_app
    from gpuyard.bootstrap import build_server

    server = build_server(settings)
    app = create_app(server)
    sock.listen(1024)  # only now: a client that connects finds the token and a ready server
    print(f"gpuyard server listening on {settings.url}", flush=True)
    print(f"  state dir: {settings.state_dir}", flush=True)
    print(f"  GPUs:      {server.service.inventory.source}", flush=True)
    print(f"  policy:    {settings.policy}", flush=True)
    print(f"  API token: {settings.token_path} (the CLI on this machine finds it)", flush=True)
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, loop="uvloop", http="httptools",
        timeout_keep_alive=30,
    )  # fmt: skip
    uvicorn.Server(config).run(sockets=[sock])


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise Unavailable(
            f"cannot listen on {host}:{port} ({exc.strerror}); is another server running? "
            "pick another --port"
        ) from None
    sock.set_inheritable(False)
    return sock


__all__ = ["GpuyardError", "run_server"]
