"""The dependencies every route takes: who is acting (authenticated by the front door before
any body is read) and the services it acts through. They are `async` on purpose: FastAPI runs
a plain `def` dependency in its thread pool, a thread hop per dependency per request."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from gpuyard.domain.errors import Unauthorized, Unavailable
from gpuyard.domain.principal import Principal
from gpuyard.services.access.accounts import AccountService
from gpuyard.services.jobs.reads import JobReads
from gpuyard.services.jobs.submit import JobSubmits
from gpuyard.services.jobs.verbs import JobVerbs
from gpuyard.services.machine.gpus import GpuDesk
from gpuyard.services.server import ServerFacade


async def _server(request: Request) -> ServerFacade:
    server: ServerFacade = request.app.state.server
    return server


async def _actor(request: Request) -> Principal:
    principal = request.scope.get("state", {}).get("principal")
    if not isinstance(principal, Principal):  # a route the front door left public
        raise Unauthorized("this route needs the API token")
    return principal


async def _submits(request: Request) -> JobSubmits:
    server: ServerFacade = request.app.state.server
    return server.submits


async def _reads(request: Request) -> JobReads:
    server: ServerFacade = request.app.state.server
    return server.reads


async def _verbs(request: Request) -> JobVerbs:
    server: ServerFacade = request.app.state.server
    return server.verbs


async def _gpus(request: Request) -> GpuDesk:
    server: ServerFacade = request.app.state.server
    return server.gpus


async def _accounts(request: Request) -> AccountService:
    server: ServerFacade = request.app.state.server
    if server.accounts is None:
        raise Unavailable("this server keeps no accounts")
    return server.accounts


Accounts = Annotated[AccountService, Depends(_accounts)]
Actor = Annotated[Principal, Depends(_actor)]
Submits = Annotated[JobSubmits, Depends(_submits)]
Reads = Annotated[JobReads, Depends(_reads)]
Verbs = Annotated[JobVerbs, Depends(_verbs)]
Gpus = Annotated[GpuDesk, Depends(_gpus)]
Server = Annotated[ServerFacade, Depends(_server)]
