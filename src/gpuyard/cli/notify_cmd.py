"""`gpuyard notify`: webhooks told of jobs' state changes (defaults, secret, delivery log).

The rules are the server's (`services/workflows/notify.py`); this only asks and prints. A job's own
webhooks are `submit --notify URL` (and `--mail-type`)."""

from __future__ import annotations

import sys
import time
from typing import Annotated, Any

import typer

from gpuyard.cli import commands
from gpuyard.cli.session import client

notify_app = typer.Typer(
    help="Webhooks told of your jobs' state changes: defaults, signing secret, delivery log.",
    no_args_is_help=True,
)
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON")]
TeamOpt = Annotated[
    str | None, typer.Option("--team", metavar="T", help="a team's defaults (admins only)")
]


def register(app: typer.Typer, admin: typer.Typer) -> None:
    """Add `gpuyard notify ...` to the app."""
    app.add_typer(notify_app, name="notify")


def _events(text: str | None) -> list[str]:
    return [e.strip().lower() for e in (text or "").split(",") if e.strip()]


@notify_app.command("set")
def notify_set(
    urls: Annotated[list[str], typer.Argument(metavar="URL...", help="http(s) webhook URLs")],
    events: Annotated[
        str | None,
        typer.Option(
            metavar="E,E",
            help="begin, end, fail, requeue, time_limit, cancel (default: end,fail)",
        ),
    ] = None,
    team: TeamOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Webhooks for every job of yours that names none (`submit --notify URL` replaces them
    for that job; `--mail-type` chooses that job's events). The first set prints your
    signing secret, once."""
    entry = client().set_notify(urls, _events(events), team=team)
    if json_out:
        commands.print_json(entry)
        return
    _settings_table([entry])
    if entry.get("secret"):
        _say_secret(entry["secret"])


@notify_app.command("show")
def notify_show(json_out: JsonOpt = False) -> None:
    """Your webhook defaults and your team's (admins: everyone's)."""
    entries = client().notify_settings()
    if json_out:
        commands.print_json(entries)
        return
    if not any(e["urls"] for e in entries):
        sys.stderr.write(
            "no webhooks set: `gpuyard notify set URL` (or `submit --notify URL` per job)\n"
        )
    if entries:
        _settings_table(entries)


@notify_app.command("clear")
def notify_clear(team: TeamOpt = None) -> None:
    """Forget your (or a team's) webhook URLs and events; the secret stays."""
    client().clear_notify(team=team)
    sys.stderr.write(f"{'team ' + team if team else 'your'} webhooks cleared\n")


@notify_app.command("secret")
def notify_secret(
    rotate: Annotated[bool, typer.Option("--rotate", help="make a new one (shown once)")] = False,
    team: TeamOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """The secret your deliveries are signed with (X-Gpuyard-Signature): made and printed
    once; `--rotate` replaces it (a lost one cannot be shown again)."""
    session = client()
    if not rotate:
        key = ("team", team) if team else ("user", session.whoami()["user"])
        for e in session.notify_settings():
            if (e["kind"], e["name"]) == key and e["secret_set"]:
                made = time.strftime("%Y-%m-%d %H:%M", time.localtime(e["secret_at"] or 0))
                sys.stderr.write(
                    f"a secret was made on {made} and shown then; `gpuyard notify secret "
                    "--rotate` makes a new one (deliveries are signed with it at once)\n"
                )
                return
    entry = session.rotate_notify_secret(team=team)
    if json_out:
        commands.print_json(entry)
        return
    _say_secret(entry["secret"])


@notify_app.command("log")
def notify_log(
    limit: Annotated[int, typer.Option(help="how many, newest first")] = 20,
    json_out: JsonOpt = False,
) -> None:
    """Your deliveries, newest first: event, job, the URL's host, state, tries, last error."""
    rows = client().notify_deliveries(limit=limit)
    if json_out:
        commands.print_json(rows)
        return
    if not rows:
        sys.stderr.write("no deliveries yet\n")
        return
    _deliveries_table(rows)


@notify_app.command("test")
def notify_test(
    url: Annotated[
        str | None, typer.Argument(help="where to send a ping (default: your webhook URLs)")
    ] = None,
    wait_s: Annotated[
        float, typer.Option("--wait", metavar="SECONDS", help="how long to wait for the answer")
    ] = 10.0,
    json_out: JsonOpt = False,
) -> None:
    """Send a `ping` event, signed like any delivery, and say how it went."""
    session = client()
    made = session.notify_test(url)
    ids = {d["id"] for d in made}
    deadline = time.monotonic() + wait_s
    while True:
        rows = [d for d in session.notify_deliveries(limit=200) if d["id"] in ids]
        if all(d["attempts"] > 0 for d in rows) or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    if json_out:
        commands.print_json(rows)
        return
    for d in rows:
        if d["state"] == "delivered":
            sys.stdout.write(f"ping to {d['host']}: delivered (HTTP {d['last_status']})\n")
        elif d["attempts"] == 0:
            sys.stdout.write(f"ping to {d['host']}: not sent yet; see `gpuyard notify log`\n")
        else:
            later = d["state"] == "pending"
            more = " (tried again later: see `gpuyard notify log`)" if later else ""
            sys.stdout.write(f"ping to {d['host']}: {d['last_error'] or d['state']}{more}\n")
    if any(d["state"] != "delivered" for d in rows):
        raise typer.Exit(1)


def _say_secret(secret: str) -> None:
    sys.stdout.write(f"secret: {secret}\n")
    sys.stderr.write(
        "shown once: give it to your receiver to check X-Gpuyard-Signature "
        "(docs: Notifications in docs/cli.md)\n"
    )


def _settings_table(entries: list[dict[str, Any]]) -> None:
    from gpuyard.cli.render import table

    rows = [
        [e["kind"], e["name"], ",".join(e["events"]) or "end,fail (default)",
         "yes" if e["secret_set"] else "no", " ".join(e["urls"]) or "-"]
        for e in entries
    ]  # fmt: skip
    sys.stdout.write(table(["KIND", "NAME", "EVENTS", "SECRET", "URLS"], rows) + "\n")


def _deliveries_table(rows: list[dict[str, Any]]) -> None:
    from gpuyard.cli.render import table

    out = []
    for d in rows:
        when = time.strftime("%m-%d %H:%M:%S", time.localtime(d["created_at"]))
        status = str(d["last_status"]) if d["last_status"] is not None else "-"
        out.append([
            when, d["event"], str(d["job_id"]) if d["job_id"] is not None else "-", d["host"],
            d["state"], str(d["attempts"]), status, d["last_error"][:60] or "-",
        ])  # fmt: skip
    headers = ["CREATED", "EVENT", "JOB", "HOST", "STATE", "TRIES", "HTTP", "LAST_ERROR"]
    sys.stdout.write(table(headers, out) + "\n")
