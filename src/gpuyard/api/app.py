"""The FastAPI app over one server's services: the front door (authentication before any
body, bounded bodies), one error table, and a router per resource."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager

from fastapi import FastAPI

from gpuyard import __version__
from gpuyard.api.errors import install_error_handlers
from gpuyard.api.front_door import PUBLIC_PATHS, FrontDoor, session_cookie
from gpuyard.api.openapi_doc import DESCRIPTION, install_openapi
from gpuyard.api.routers import (
    admin,
    arrays,
    docs,
    gpu_history,
    gpus,
    jobs,
    limits,
    live,
    nodes,
    notify,
    progress,
    sweeps,
    system,
    tokens,
    verbs,
    web,
)
from gpuyard.api.static_files import StaticFiles, static_root
from gpuyard.api.submit_route import SubmitFastPath
from gpuyard.schemas.v1 import ErrorOut
from gpuyard.services.server import ServerFacade

# Every route may answer these (the front door's 421 and 429 come before any route is chosen:
# a Host not this server's, too many failed authentications; 429 is also a quota; 503 a
# service this server does not keep; 507 the state disk full, for any write), all as
# {"error": {...}}.
_ERRORS = {
    code: {"model": ErrorOut} for code in (400, 401, 403, 404, 409, 413, 421, 422, 429, 503, 507)
}


API_THREADS = 40  # anyio's default for sync routes


def create_app(server: ServerFacade, *, manage_lifecycle: bool = True) -> FastAPI:
    """The API over one server; with `manage_lifecycle`, the app starts and closes it."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # `asyncio.to_thread`'s pool, as wide as the sync routes' (anyio's 40): its default
        # is the CPU count + 4 (6 here), and one `show`'s projection or explanation then
        # waited behind whole-list builds and log reads of 10,000 jobs (a `show` of 8.7 s).
        asyncio.get_running_loop().set_default_executor(
            ThreadPoolExecutor(API_THREADS, thread_name_prefix="gpuyard-api")
        )
        if manage_lifecycle:
            server.start()
        yield
        if manage_lifecycle:
            server.close()

    app = FastAPI(
        title="gpuyard", version=__version__, lifespan=lifespan, responses=_ERRORS,  # type: ignore[arg-type]
        description=DESCRIPTION,
        docs_url=None, redoc_url=None,  # served from the package instead: routers/docs.py
    )  # fmt: skip
    app.state.server = server  # with its web sessions, events ring and GPU stream's sampler
    app.state.web_static = StaticFiles(static_root())  # the dashboard's files (static_files.py)
    install_error_handlers(app)
    routers = (system.router, jobs.router, verbs.router, gpus.router, admin.router,
               admin.accounts_router, tokens.router, limits.router, web.api_router, live.router,
               web.router, gpu_history.router, progress.router, arrays.router,
               nodes.router)  # fmt: skip
    for router in (*routers, sweeps.router):
        app.include_router(router)
    app.include_router(notify.router)  # webhooks (services/workflows/notify.py)
    app.include_router(docs.router)  # `/` and `/docs`, Swagger UI's files from the package
    install_openapi(  # the front door's schemes, which FastAPI cannot see (openapi_doc.py)
        app, cookie_name=session_cookie(server.access.hosts.port), public=PUBLIC_PATHS
    )
    app.add_middleware(SubmitFastPath, server=server)  # inside the front door
    app.add_middleware(
        FrontDoor,
        auth=server.auth,
        access=server.access,
        peers=server.peers,
        sessions=server.web_sessions,
    )
    return app
