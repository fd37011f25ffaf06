"""`gpuyard admin limit set|list|clear`, `gpuyard share` (as `sshare`) and `gpuyard usage` (as
`sreport`). The rules are the server's (`services/access/quotas.py`); this only asks and prints."""

from __future__ import annotations

import csv
import sys
from collections.abc import Sequence
from typing import Annotated, Any

import typer

from gpuyard.cli import commands
from gpuyard.cli.session import client
from gpuyard.cli.when import since_timestamp

limit_app = typer.Typer(
    help="Quotas and fair-share weights per user or team (admins only).", no_args_is_help=True
)
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON")]
UserOpt = Annotated[str | None, typer.Option("--user", metavar="U", help="a user's limits")]
TeamOpt = Annotated[str | None, typer.Option("--team", metavar="T", help="a team's limits")]


def register(app: typer.Typer, admin: typer.Typer) -> None:
    """Add `share` and `usage` to the app and `limit` to `gpuyard admin`."""
    admin.add_typer(limit_app, name="limit")
    app.command("share")(share)
    app.command("usage")(usage)


def _target(user: str | None, team: str | None) -> tuple[str, str]:
    if (user is None) == (team is None):
        raise typer.BadParameter("give exactly one of --user U or --team T")
    return ("user", user) if user is not None else ("team", team or "")


@limit_app.command("set")
def limit_set(
    user: UserOpt = None,
    team: TeamOpt = None,
    max_gpus: Annotated[int | None, typer.Option(help="GPUs held by running jobs at once")] = None,
    max_pending: Annotated[int | None, typer.Option(help="jobs pending at once")] = None,
    max_gpu_hours: Annotated[
        float | None, typer.Option(help="GPU-hours per rolling --window")
    ] = None,
    window: Annotated[
        str | None, typer.Option(metavar="DURATION", help="the GPU-hours window (7d)")
    ] = None,
    shares: Annotated[float | None, typer.Option(help="fair-share weight (1)")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Set some limits of a user or team (others stay). Jobs over a running limit wait with its
    reason (QOSMaxGpuPerUser, QOSGrpGpuLimit, ...); a job no limit lets run is refused."""
    from gpuyard.domain.errors import GpuyardError
    from gpuyard.domain.units import parse_duration_s

    kind, name = _target(user, team)
    window_s = None
    if window is not None:
        try:
            window_s = parse_duration_s(window, field="window")
        except GpuyardError as exc:
            raise typer.BadParameter(exc.message) from None
    entry = client().set_limits(
        kind, name, max_gpus=max_gpus, max_pending=max_pending, max_gpu_hours=max_gpu_hours,
        window_s=window_s, shares=shares,
    )  # fmt: skip
    if json_out:
        commands.print_json(entry)
        return
    _limits_table([entry])


@limit_app.command("list")
def limit_list(json_out: JsonOpt = False) -> None:
    """Every user's and team's limits (yours and your team's unless you are an admin)."""
    entries = client().limits()
    if json_out:
        commands.print_json(entries)
        return
    if not entries:
        sys.stderr.write("no limits set\n")
        return
    _limits_table(entries)


@limit_app.command("clear")
def limit_clear(user: UserOpt = None, team: TeamOpt = None) -> None:
    """Forget every limit and the share of a user or team."""
    kind, name = _target(user, team)
    client().clear_limits(kind, name)
    sys.stderr.write(f"{kind} {name}: limits cleared\n")


def _limits_table(entries: Sequence[dict[str, Any]]) -> None:
    rows = [("KIND", "NAME", "MAX_GPUS", "MAX_PENDING", "MAX_GPU_H", "WINDOW", "SHARES")]
    for e in entries:
        rows.append((
            e["kind"], e["name"], _opt(e["max_gpus"]), _opt(e["max_pending"]),
            _opt(e["max_gpu_hours"]), _window(e["window_s"]), _opt(e["shares"], "1"),
        ))  # fmt: skip
    _table(rows)


def share(json_out: JsonOpt = False) -> None:
    """Fair share per user, as `sshare`: shares, usage decayed with the half-life, factor
    (1: owed GPUs, 0.5: used exactly their share, toward 0: used more)."""
    rows = client().share()
    if json_out:
        commands.print_json(rows)
        return
    table = [("USER", "TEAM", "RAW_SHARES", "NORM_SHARES", "RAW_USAGE_GPU_H", "EFFECTV_USAGE",
              "FAIRSHARE")]  # fmt: skip
    for r in rows:
        table.append((
            r["user"], r["team"] or "-", f"{r['raw_shares']:g}", f"{r['norm_shares']:.6f}",
            f"{r['raw_usage_gpu_h']:.2f}", f"{r['norm_usage']:.6f}", f"{r['factor']:.6f}",
        ))  # fmt: skip
    _table(table)


def usage(
    by: Annotated[str, typer.Option(help="user or team")] = "user",
    since: Annotated[
        str | None, typer.Option(metavar="WHEN", help="2h, 3d (ago) or 2026-11-30[T12:00]")
    ] = None,
    csv_out: Annotated[bool, typer.Option("--csv", help="print CSV")] = False,
    json_out: JsonOpt = False,
) -> None:
    """GPU-hours allocated and used (telemetry), jobs by final state, mean GPU utilisation and
    the GPUs' energy (kWh), as `sreport` (default: the last 7 days). Admins see everyone;
    users themselves."""
    if by not in ("user", "team"):
        raise typer.BadParameter(f"--by {by!r}: use user or team")
    rows = client().usage(by=by, since=since_timestamp(since) if since else None)
    if json_out:
        commands.print_json(rows)
        return
    header = ("USER" if by == "user" else "TEAM", "JOBS", "ALLOC_GPU_H", "USED_GPU_H", "UTIL%",
              "ENERGY_KWH", "STATES")  # fmt: skip
    lines = [
        (
            r["key"],
            str(r["jobs"]),
            f"{r['allocated_gpu_h']:.2f}",
            _opt(r["used_gpu_h"], "-", 2),
            _opt(r["util_mean_pct"], "-", 1),
            _opt(r.get("energy_kwh"), "-", 3),
            " ".join(f"{k}={v}" for k, v in sorted(r["states"].items())),
        )
        for r in rows
    ]
    if csv_out:
        writer = csv.writer(sys.stdout)
        writer.writerow(h.lower() for h in header)
        writer.writerows(lines)
        return
    _table([header, *lines])


def _opt(value: float | None, none: str = "-", digits: int | None = None) -> str:
    if value is None:
        return none
    return f"{value:.{digits}f}" if digits is not None else f"{value:g}"


def _window(window_s: float) -> str:
    days = window_s / 86400
    return f"{days:g}d" if days >= 1 else f"{window_s / 3600:g}h"


def _table(rows: Sequence[tuple[str, ...]]) -> None:
    """Plain columns, like `sshare` (names are checked by the server: no control characters)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        line = "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))
        sys.stdout.write(line.rstrip() + "\n")
