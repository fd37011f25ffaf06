"""The server itself: liveness, Prometheus metrics, what it is."""

from __future__ import annotations

from fastapi import APIRouter, Response

from gpuyard import __version__
from gpuyard.api.deps import Actor, Server
from gpuyard.api.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from gpuyard.api.metrics import render_metrics
from gpuyard.api.openapi_doc import PROMETHEUS_TEXT
from gpuyard.domain.errors import WritesPaused
from gpuyard.schemas.v1 import ServerInfoOut
from gpuyard.services.access.rules import require_scraper

router = APIRouter(tags=["system"])


@router.get("/healthz")
async def healthz(server: Server) -> dict[str, str]:
    """On the event loop, not in the thread pool: its threads may all be waiting on a stalled
    database, and liveness must still answer. A server that lost its hold on its database
    says so (503 with Retry-After, one line why) until it has taken it back."""
    problem = server.hold.problem if server.hold is not None else None
    if problem is not None:
        raise WritesPaused(problem)
    return {"status": "ok"}


@router.get("/metrics", response_class=Response, responses={200: PROMETHEUS_TEXT})
def metrics(server: Server, actor: Actor) -> Response:
    """Prometheus text format: dcgm-exporter's GPU metrics and gpuyard_* queue metrics (for the
    metrics token and admins: `rules.require_scraper` says why)."""
    require_scraper(actor)
    body = render_metrics(server, server.gpus.inventory.node.name)
    return Response(body, media_type=METRICS_CONTENT_TYPE)


@router.get("/api/v1/info")
def info(server: Server, actor: Actor) -> ServerInfoOut:
    inv = server.gpus.inventory
    return ServerInfoOut(
        version=__version__, gpus_source=inv.source, num_gpus=len(inv.gpus), cpus=inv.node.cpus,
        mem_mib=inv.node.mem_mib, owner=server.info.owner, policy=server.info.policy,
        confinement=server.info.confinement or None,
    )  # fmt: skip
