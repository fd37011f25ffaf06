"""The server's front page and its API documentation, both without a credential.

`/`: a browser (Accept: text/html) is sent to the dashboard (`/ui/`); anything else hears
where things are, in JSON. `/docs`: Swagger UI over `/openapi.json`, its script and style
served from the `swagger-ui-bundle` package (never a CDN: a server without the internet still
shows its docs); `/redoc` sends to `/docs` (ReDoc has no packaged copy). Each asset is a fixed
path (`DOCS_ASSETS`), no path parameter, so nothing else of the package can be asked for.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse
from swagger_ui_bundle import swagger_ui_path

router = APIRouter(include_in_schema=False)

# URL path -> (file in the package's Swagger UI folder, media type)
DOCS_ASSETS = {
    "/docs/swagger-ui-bundle.js": ("swagger-ui-bundle.js", "text/javascript"),
    "/docs/swagger-ui.css": ("swagger-ui.css", "text/css"),
    "/docs/favicon-32x32.png": ("favicon-32x32.png", "image/png"),
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
        swagger_favicon_url="/docs/favicon-32x32.png", oauth2_redirect_url="/docs/oauth2-redirect",
    )  # fmt: skip


@router.get("/docs/oauth2-redirect")
async def swagger_ui_redirect() -> Response:
    return get_swagger_ui_oauth2_redirect_html()


@router.get("/redoc")
async def redoc() -> Response:
    return RedirectResponse("/docs", status_code=308)


def _asset_route(path: str, file_name: str, media_type: str) -> None:
    async def asset() -> Response:
        return FileResponse(
            str(swagger_ui_path / file_name), media_type=media_type,
            headers={"Cache-Control": "public, max-age=86400"},
        )  # fmt: skip

    router.add_api_route(path, asset, methods=["GET"])


for _path, (_file, _type) in DOCS_ASSETS.items():
    _asset_route(_path, _file, _type)
