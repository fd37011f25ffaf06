"""The server's own login page (HTML, no script): a token field, or a one-time link's button."""

from __future__ import annotations

import html

from fastapi import Request, Response

from gpuyard.api.static_files import dashboard_files, page_response

_LOGIN_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>gpuyard: log in</title>{css}</head>
<body class="login"><main class="login-box">
<h1>gpuyard</h1>
{error}
<form method="post" action="/ui/login">
{fields}
<input type="hidden" name="next" value="{next}">
<button type="submit">{button}</button>
</form>
<p class="hint">{hint}</p>
</main></body></html>
"""


def login_form(
    request: Request,
    *,
    code: str = "",
    user: str | None = None,
    next_path: str = "/ui/",
    error: str = "",
    status: int = 200,
) -> Response:
    """The login form (no script): a token field, or, for a one-time link, one button."""
    css = ""
    if dashboard_files(request).get("login.css") is not None:
        css = '<link rel="stylesheet" href="/ui/static/login.css">'
    elif dashboard_files(request).get("app.css") is not None:
        css = '<link rel="stylesheet" href="/ui/static/app.css">'
    if code:
        fields = f'<input type="hidden" name="code" value="{html.escape(code)}">'
        button = f"Continue as {html.escape(user)}" if user else "Continue"
        hint = "This link works once, for a minute."
    else:
        fields = (
            '<label for="token">API token</label>\n'
            '<input id="token" name="token" type="password" autocomplete="off" required '
            'autofocus placeholder="gpy_...">'
        )
        button = "Log in"
        hint = (
            "Make a token with <code>gpuyard token create</code>, or run <code>gpuyard "
            "dashboard</code> on the server's machine for a one-time link."
        )
    shown = f'<p class="error" role="alert">{html.escape(error)}</p>' if error else ""
    page = _LOGIN_PAGE.format(css=css, error=shown, fields=fields, next=html.escape(next_path),
                              button=button, hint=hint)  # fmt: skip
    return page_response(page, status)
