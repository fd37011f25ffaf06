"""The server's front page and its API documentation, both without a credential.

`/`: a browser (Accept: text/html) is sent to the dashboard (`/ui/`); anything else hears
where things are, in JSON. `/docs` (Swagger UI) and `/redoc` (ReDoc) over `/openapi.json`, their
scripts and style served from the `fastapi-offline` package's copies (never a CDN: a server
without the internet still shows its docs; Swagger UI 5, which reads OpenAPI 3.1). Each asset
is a fixed path (`DOCS_ASSETS`), no path parameter, so nothing else can be asked for.
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import APIRouter, Request, Response
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse

router = APIRouter(include_in_schema=False)

_ASSETS_DIR = Path(fastapi_offline.__file__).parent / "static"
# URL path -> (file in the package's static folder, media type)
DOCS_ASSETS = {
    "/docs/swagger-ui-bundle.js": ("swagger-ui-bundle.js", "text/javascript"),
    "/docs/swagger-ui.css": ("swagger-ui.css", "text/css"),
    "/docs/redoc.standalone.js": ("redoc.standalone.js", "text/javascript"),
    "/docs/favicon.png": ("favicon.png", "image/png"),
}
_INDEX = {"dashboard": "/ui/", "api": "/api/v1", "docs": "/docs", "openapi": "/openapi.json"}


@router.get("/")
async def front_page(request: Request) -> Response:
    """A browser to the dashboard; an API client hears where things are."""
    if "text/html" in request.headers.get("accept", ""):
        return RedirectResponse("/ui/", status_code=303)
    return JSONResponse(_INDEX)


@router.get("/docs")
async def swagger_ui() -> Response:
    return get_swagger_ui_html(
        openapi_url="/openapi.json", title="gpuyard API",
        swagger_js_url="/docs/swagger-ui-bundle.js", swagger_css_url="/docs/swagger-ui.css",
        swagger_favicon_url="/docs/favicon.png", oauth2_redirect_url="/docs/oauth2-redirect",
    )  # fmt: skip


@router.get("/docs/oauth2-redirect")
async def swagger_ui_redirect() -> Response:
    return get_swagger_ui_oauth2_redirect_html()


@router.get("/redoc")
async def redoc() -> Response:
    return get_redoc_html(
        openapi_url="/openapi.json", title="gpuyard API", redoc_js_url="/docs/redoc.standalone.js",
        redoc_favicon_url="/docs/favicon.png", with_google_fonts=False,
    )  # fmt: skip


def _asset_route(path: str, file_name: str, media_type: str) -> None:
    async def asset() -> Response:
        return FileResponse(
            str(_ASSETS_DIR / file_name), media_type=media_type,
            headers={"Cache-Control": "public, max-age=86400"},
        )  # fmt: skip

    router.add_api_route(path, asset, methods=["GET"])


for _path, (_file, _type) in DOCS_ASSETS.items():
    _asset_route(_path, _file, _type)
