"""The dashboard's static files, read once and hashed, and the CSP every /ui answer carries."""

from __future__ import annotations

import hashlib
import json
import mimetypes
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from fastapi import Request, Response

from gpuyard.api.errors import error_body

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    # A login code in a URL never leaves for another site in a Referer. Not no-referrer: under
    # it browsers send `Origin: null` on the page's own POSTs (the login form, fetch), which
    # the front door's cross-site check refuses (found by tests/web in Chromium).
    "Referrer-Policy": "same-origin",
}
_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".html": "text/html; charset=utf-8",
    ".json": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".woff2": "font/woff2",
    ".map": "application/json",
    ".txt": "text/plain; charset=utf-8",
}
STATIC_PREFIX = "/ui/static/"
_REVALIDATE = "no-cache"  # use the cached copy after asking (ETag: a 304 costs no body)
_IMMUTABLE = "public, max-age=31536000, immutable"  # asked for by its hash (?v=HASH)


def static_root() -> Path:
    """The dashboard's files inside the installed package."""
    return Path(str(resources.files("gpuyard") / "web" / "static"))


@dataclass(frozen=True, slots=True)
class Asset:
    body: bytes
    etag: str  # the content's SHA-256, short: also the `?v=` an immutable reference uses
    media_type: str
    mtime_ns: int


_MAX_PATH_CHARS = 1024  # longer than any file of the dashboard's path


class StaticFiles:
    """The package's static files, read once and kept with their hashes (a few hundred KiB);
    re-read when a file changes (an editable install during development)."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self._cache: dict[Path, Asset] = {}

    def get(self, relative: str) -> Asset | None:
        if not relative or any(p.startswith(".") or not p for p in relative.split("/")):
            return None  # no hidden files, no `..`, no empty parts
        if "\x00" in relative or len(relative) > _MAX_PATH_CHARS:
            return None  # no file's name (resolving it would raise: a 500 per request)
        try:
            path = (self.root / relative).resolve()
        except (OSError, ValueError, RuntimeError):
            return None
        if not path.is_relative_to(self.root):
            return None
        try:
            stat = path.stat()
        except OSError:
            return None
        if not path.is_file():
            return None
        cached = self._cache.get(path)
        if cached is not None and cached.mtime_ns == stat.st_mtime_ns:
            return cached
        body = path.read_bytes()
        media = _TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0]
        asset = Asset(
            body,
            hashlib.sha256(body).hexdigest()[:16],
            media or "application/octet-stream",
            stat.st_mtime_ns,
        )
        self._cache[path] = asset
        return asset


def dashboard_files(request: Request) -> StaticFiles:
    """The app's static files (create_app keeps them on app.state)."""
    files: StaticFiles = request.app.state.web_static
    return files


def page_response(body: bytes | str, status: int = 200, **headers: str) -> Response:
    """An HTML page of the dashboard's: never cached, under the security headers."""
    return Response(
        body,
        status_code=status,
        media_type="text/html; charset=utf-8",
        headers={**SECURITY_HEADERS, "Cache-Control": "no-store", **headers},
    )


def serve_file(request: Request, path: str) -> Response:
    """A file of the dashboard's: revalidated by ETag, or cached for good when asked for by
    its hash (`?v=` the ETag's value); 404 for any other path."""
    asset = dashboard_files(request).get(path)
    if asset is None:
        return _not_found(f"no dashboard file {path!r}")
    immutable = request.query_params.get("v") == asset.etag
    return _serve_asset(request, asset, _IMMUTABLE if immutable else _REVALIDATE)


def _serve_asset(request: Request, asset: Asset, cache: str) -> Response:
    etag = f'"{asset.etag}"'
    headers = {**SECURITY_HEADERS, "ETag": etag, "Cache-Control": cache}
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers=headers)
    return Response(asset.body, media_type=asset.media_type, headers=headers)


def _not_found(message: str) -> Response:
    return Response(
        json_bytes(error_body("not_found", message)),
        status_code=404,
        media_type="application/json",
        headers=SECURITY_HEADERS,
    )


def json_bytes(data: Any) -> bytes:
    """`data` as a JSON body (json.dumps' own spacing, as every /ui error is written)."""
    return json.dumps(data).encode()
