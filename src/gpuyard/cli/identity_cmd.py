"""`gpuyard token create|list|revoke`, `gpuyard login URL`, `gpuyard whoami` and
`gpuyard admin user|team`: who you are to a server. The rules are the server's
(`services/access/accounts.py`); this only asks and prints. A secret is printed once, alone on
stdout (so `$(gpuyard token create)` works)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from typing import Annotated

import typer

from gpuyard.cli import commands
from gpuyard.cli.session import client

token_app = typer.Typer(help="Your API tokens (for the SDK, REST, another machine).",
                        no_args_is_help=True)  # fmt: skip
user_app = typer.Typer(help="Accounts: who may use the server (admins only).", no_args_is_help=True)
team_app = typer.Typer(help="Teams of users (admins only).", no_args_is_help=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON")]


def register(app: typer.Typer, admin: typer.Typer) -> None:
    """Add these commands to the app (`token`, `login`) and to `gpuyard admin`."""
    app.add_typer(token_app, name="token")
    app.command("login")(login)
    app.command("whoami")(whoami)
    admin.add_typer(user_app, name="user")
    admin.add_typer(team_app, name="team")


def _when(at: float | None, never: str = "never") -> str:
    return never if at is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(at))


@token_app.command("create")
def token_create(
    expires: Annotated[
        str, typer.Option(help="lifetime: 90d, 12h, [D-]HH:MM:SS, or never")
    ] = "90d",
    scope: Annotated[
        str, typer.Option(help="read (GETs), submit (also your jobs and tokens), admin (all)")
    ] = "submit",
    json_out: JsonOpt = False,
) -> None:
    """Make a token for yourself; its secret is printed this once and kept nowhere."""
    made = client().create_token(scope=scope, expires=expires)
    if json_out:
        commands.print_json(made)
        return
    sys.stdout.write(made["token"] + "\n")
    sys.stderr.write(
        f"token {made['id']} (scope {made['scope']}, expires "
        f"{_when(made['expires_at'])}): shown once, keep it secret; "
        "`gpuyard login URL` on another machine takes it\n"
    )


@token_app.command("list")
def token_list(
    json_out: JsonOpt = False,
    all_users: Annotated[
        bool, typer.Option("--all", help="every user's tokens (admins), with a USER column")
    ] = False,
) -> None:
    """Your tokens (never their secrets): id, scope, created, expires, last used."""
    tokens = client().tokens(all=all_users)
    if json_out:
        commands.print_json(tokens)
        return
    rows: list[tuple[str, ...]] = [("ID", "SCOPE", "CREATED", "EXPIRES", "LAST USED")]
    for t in tokens:
        expires = "expired" if t["expired"] else _when(t["expires_at"])
        rows.append((str(t["id"]), t["scope"], _when(t["created_at"]), expires,
                     _when(t["last_used_at"], "-")))  # fmt: skip
    if all_users:
        rows = [(row[0], user, *row[1:]) for row, user in zip(
            rows, ["USER", *(t["user"] for t in tokens)], strict=True)]  # fmt: skip
    _table(rows)


@token_app.command("revoke")
def token_revoke(token_id: Annotated[int, typer.Argument(metavar="ID")]) -> None:
    """Refuse a token from now on (yours; an admin: anyone's)."""
    client().revoke_token(token_id)
    sys.stdout.write(f"token {token_id} revoked\n")


def login(
    url: Annotated[str, typer.Argument(help="the server, e.g. https://gpus.lab.example:8765")],
    token_file: Annotated[
        str | None, typer.Option(help="read the token from this file [stdin, or ask]")
    ] = None,
) -> None:
    """Keep a token for URL in ~/.config/gpuyard/token (0600): later commands go to URL with
    it (GPUYARD_URL and GPUYARD_TOKEN still win)."""
    from gpuyard.client import Client, login_token_path, split_url

    split_url(url)  # a bad URL: one line, before asking for anything
    token = _read_token(token_file)
    if not token:
        raise typer.BadParameter("no token given: paste one made by `gpuyard token create`")
    me = Client(url, token).whoami()  # the server says who this token is, or refuses it
    path = login_token_path()
    _write_private(path, token)
    _write_private(os.path.join(os.path.dirname(path), "url"), url.rstrip("/"))
    sys.stdout.write(
        f"logged in to {url} as {me['user']} (scope {me.get('scope', '?')}); token kept in {path}\n"
    )


def whoami(json_out: JsonOpt = False) -> None:
    """Who the server takes you for: your account, its role and team, what this credential
    may do, and which server."""
    session = client()
    me = session.whoami()
    if json_out:
        commands.print_json({**me, "server": session.url})
        return
    team = f", team {me['team']}" if me.get("team") else ""
    sys.stdout.write(
        f"{me['user']} ({me['role']}{team}; this credential: {me.get('scope', '?')}) "
        f"on {session.url}\n"
    )


def _read_token(token_file: str | None) -> str:
    if token_file is not None:
        with open(os.path.expanduser(token_file)) as f:
            return f.read().strip()
    if not sys.stdin.isatty():
        return sys.stdin.readline().strip()
    import getpass

    return getpass.getpass("API token (from `gpuyard token create`): ").strip()


def _write_private(path: str, text: str) -> None:
    """Owner-only from the first byte (created 0600, never widened later), replaced whole."""
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    temp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text + "\n")
    os.replace(temp, path)


@user_app.command("add")
def user_add(
    name: Annotated[str, typer.Argument(metavar="NAME")],
    team: Annotated[str | None, typer.Option(help="the user's team [default]")] = None,
    role: Annotated[str, typer.Option(help="admin or user")] = "user",
    unix_user: Annotated[str | None, typer.Option(help="whom the jobs run as [NAME]")] = None,
) -> None:
    """Add an account; its user then makes tokens with `gpuyard token create`."""
    made = client().add_user(name, team=team, role=role, unix_user=unix_user)
    sys.stdout.write(f"user {made['name']} added (team {made['team']}, role {made['role']})\n")


@user_app.command("list")
def user_list(json_out: JsonOpt = False) -> None:
    """Every account: name, role, team, Unix user, whether disabled."""
    users = client().users()
    if json_out:
        commands.print_json(users)
        return
    rows: list[tuple[str, ...]] = [("NAME", "ROLE", "TEAM", "UNIX USER", "STATE", "CREATED")]
    for u in users:
        state = "disabled" if u["disabled"] else "active"
        rows.append((u["name"], u["role"], u["team"], u["unix_user"] or u["name"], state,
                     _when(u["created_at"])))  # fmt: skip
    _table(rows)


@user_app.command("disable")
def user_disable(name: Annotated[str, typer.Argument(metavar="NAME")]) -> None:
    """Refuse all of the user's tokens from now on; their jobs and history stay."""
    client().disable_user(name)
    sys.stdout.write(f"user {name} disabled: none of their tokens is accepted\n")


@user_app.command("enable")
def user_enable(name: Annotated[str, typer.Argument(metavar="NAME")]) -> None:
    """Accept a disabled user's tokens again (those not revoked or expired meanwhile)."""
    client().enable_user(name)
    sys.stdout.write(f"user {name} enabled\n")


@team_app.command("add")
def team_add(name: Annotated[str, typer.Argument(metavar="TEAM")]) -> None:
    """Add a team (`admin user add NAME --team TEAM` puts users in it)."""
    client().add_team(name)
    sys.stdout.write(f"team {name} added\n")


@team_app.command("list")
def team_list(json_out: JsonOpt = False) -> None:
    teams = client().teams()
    if json_out:
        commands.print_json(teams)
        return
    _table([("TEAM", "CREATED"), *((t["name"], _when(t["created_at"])) for t in teams)])


def _table(rows: Sequence[tuple[str, ...]]) -> None:
    """Plain columns, like `squeue` (names are checked by the server: no control characters)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        line = "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))
        sys.stdout.write(line.rstrip() + "\n")
