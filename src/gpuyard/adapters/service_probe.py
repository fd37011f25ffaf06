"""A service's health check, one HTTP GET (or a TCP connect) on a machine's loopback: the
server's own (`ServiceHealth`, wired in `bootstrap/core.py`) or, on a cluster, another
machine's, made there by its agent (`MachineAgent.probe`)."""

from __future__ import annotations

import http.client
import socket

_ERROR_CHARS = 200  # a failed check's reason, as `show` prints it


def probe(host: str, port: int, path: str, timeout_s: float) -> str | None:
    """One check: `GET path` (2xx/3xx), or a TCP connection when there is no path."""
    try:
        if not path:
            socket.create_connection((host, port), timeout=timeout_s).close()
            return None
        conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
        try:
            conn.request("GET", path, headers={"User-Agent": "gpuyard-health"})
            status = conn.getresponse().status
        finally:
            conn.close()
    except TimeoutError:
        return f"no answer within {timeout_s:g} s"
    except ConnectionRefusedError:
        return "connection refused (nothing listens on the port)"
    except (OSError, http.client.HTTPException) as exc:
        return f"{type(exc).__name__}: {exc}"[:_ERROR_CHARS]
    return None if 200 <= status < 400 else f"HTTP {status} from {path}"
