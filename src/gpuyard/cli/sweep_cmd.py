"""`gpuyard sweep`: hyper-parameter sweeps (grid or random, median stopping) as job arrays.

    gpuyard sweep sweep.toml          queue every trial (prints the sweep's id and trial count;
                                      --parsable: the id alone)
    gpuyard sweep sweep.toml --dry-run   the trials it would make, nothing queued
    gpuyard sweep show ID             the trials ranked by the metric
    gpuyard sweep list                your sweeps

The file is read and checked here (`domain/sweep.py`: a mistake is one line naming the file's
line and key) and checked again by the server, which expands it the same way.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from gpuyard.cli import commands
from gpuyard.cli.render import printable, table
from gpuyard.cli.session import client
from gpuyard.domain.errors import InvalidRequest

if TYPE_CHECKING:
    from gpuyard.domain.sweep import Sweep

_PARAMS_WIDTH = 60


def register(app: typer.Typer, admin: typer.Typer) -> None:
    """Add this module's commands to the app (and to `gpuyard admin`)."""
    app.command("sweep", no_args_is_help=True)(sweep)


def sweep(
    what: Annotated[
        str, typer.Argument(metavar="FILE|show|list", help="a sweep file (TOML), show or list")
    ],
    sweep_id: Annotated[
        str | None, typer.Argument(metavar="[ID]", help="the sweep `show` shows")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="print the trials the file makes; queue nothing")
    ] = False,
    everyone: Annotated[bool, typer.Option("--all", help="list: every user's (admins)")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    parsable: Annotated[
        bool, typer.Option("--parsable", help="print the sweep's id alone (as sbatch's)")
    ] = False,
) -> None:
    """Run a hyper-parameter sweep from a TOML file: every trial a task of one job array (at
    most max_running at once), the worst stopped early by the median rule; `sweep show ID`
    ranks the trials by the metric, `sweep list` lists your sweeps, `gpuyard cancel ID`
    cancels every trial. The file's keys: docs/cli.md, "Sweeps"."""
    if what == "list" and sweep_id is None:
        _list(everyone, json_out)
    elif what == "show":
        if sweep_id is None:
            _usage("give the sweep's id: gpuyard sweep show ID")
        _show(_sweep_id(sweep_id), json_out)
    elif sweep_id is not None:
        _usage(f"unexpected {sweep_id!r}: gpuyard sweep FILE | show ID | list")
    else:
        _submit(what, dry_run, json_out, parsable)


def _usage(message: str) -> NoReturn:
    """A usage mistake: one line, exit 2 (as click's own)."""
    sys.stderr.write(f"gpuyard: {message}\n")
    raise typer.Exit(2)


def _sweep_id(text: str) -> int:
    value = int(text) if text.isdigit() else 0
    if value <= 0:
        _usage(f"{text!r} is not a sweep id (a number, as `sweep list` shows)")
    return value


def read_sweep_file(path: str) -> tuple[dict[str, Any], Sweep]:
    """The file's table and its checked sweep; one-line errors naming the line and key."""
    import tomllib

    from gpuyard.domain.sweep import line_of, parse_sweep

    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise InvalidRequest(f"cannot read the sweep file {path}: {exc.strerror or exc}") from None
    text = raw.decode("utf-8", "replace")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidRequest(f"{path}: not valid TOML: {exc}") from None
    try:
        return doc, parse_sweep(doc)
    except InvalidRequest as exc:
        line = line_of(text, exc.field or "")
        where = f"{path}, line {line}" if line else path
        message = exc.message.removeprefix("sweep file: ")
        raise InvalidRequest(f"{where}: {message}", field=exc.field) from None


def _submit(path: str, dry_run: bool, json_out: bool, parsable: bool = False) -> None:
    doc, checked = read_sweep_file(path)
    if dry_run:
        _print_dry_run(checked, json_out)
        return
    check_trial_program(path, checked)
    made = client().submit_sweep(_json_safe(doc), os.getcwd())
    if json_out:
        commands.print_json(made)
        return
    if parsable:  # SWEEP=$(gpuyard sweep --parsable FILE)
        print(made["id"])
        return
    cap = f", at most {made['max_running']} at once" if made.get("max_running") else ""
    print(
        f"sweep {made['id']} ({printable(made['name'])}): {made['trial_count']} trials "
        f"queued{cap}; `gpuyard sweep show {made['id']}` ranks them"
    )


_INTERPRETERS = ("python", "sh", "bash")
_SCRIPTS = (".py", ".sh", ".bash")


def check_trial_program(path: str, checked: Sweep) -> None:
    """What every trial runs is here, checked as `submit` checks its program: a missing one
    fails now, in one line naming the file's line, not in every trial after its wait. The
    program, and the script an interpreter is given (`python3 train.py`), from this folder."""
    from gpuyard.cli.submitting import check_program
    from gpuyard.domain.sweep import line_of

    argv = list(checked.draft(0, checked.expand()[0], None).argv)
    missing: str | None = None
    try:
        check_program(argv[0])
    except InvalidRequest:
        missing = argv[0]
    script = argv[1] if len(argv) > 1 else ""
    interpreted = os.path.basename(argv[0]).startswith(_INTERPRETERS)
    if missing is None and interpreted and script.endswith(_SCRIPTS) and not os.path.isfile(script):
        missing = script
    if missing is None:
        return
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            line = line_of(f.read(), "command")
    except OSError:
        line = None
    where = f"{path}, line {line}" if line else path
    here = "" if os.path.isabs(missing) else f" in {os.getcwd()}"
    raise InvalidRequest(
        f"{where}: command: {missing}: no such file{here}; run the sweep from the folder its "
        "paths are relative to, or give full paths",
        field="command",
    )


def _json_safe(value: Any) -> Any:
    """TOML's dates and times as text (a checked sweep has none left: a safeguard)."""
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _print_dry_run(checked: Sweep, json_out: bool) -> None:
    trials = checked.expand()
    if json_out:
        drafts = [checked.draft(i, p, None) for i, p in enumerate(trials)]
        commands.print_json(
            [
                {"index": i, "params": p, "command": list(d.argv)}
                for i, (p, d) in enumerate(zip(trials, drafts, strict=True))
            ]
        )
        return
    rows = [
        [str(i), _params(p), " ".join(checked.draft(i, p, None).argv)] for i, p in enumerate(trials)
    ]
    print(table(["TRIAL", "PARAMS", "COMMAND"], rows))
    print(f"{len(trials)} trials ({checked.method}); nothing queued (--dry-run)")


def _list(everyone: bool, json_out: bool) -> None:
    found = client().sweeps(all=everyone)
    if json_out:
        commands.print_json(found)
        return
    if not found:
        print("no sweeps: `gpuyard sweep FILE` runs one")
        return
    rows = [
        [str(s["id"]), s["name"], s["owner"], str(s["trial_count"]), _states(s["states"]),
         _metric(s), (s["submitted_at"] or "")[:19].replace("T", " ")]
        for s in found
    ]  # fmt: skip
    print(table(["ID", "NAME", "USER", "TRIALS", "STATES", "METRIC", "SUBMITTED"], rows))


def _show(sweep_id: int, json_out: bool) -> None:
    found = client().sweep(sweep_id)
    if json_out:
        commands.print_json(found)
        return
    print(
        f"sweep {found['id']} {printable(found['name'])} ({found['owner']}): "
        f"{found['trial_count']} trials, {found['method']}"
        + (f", at most {found['max_running']} at once" if found["max_running"] else "")
    )
    print(f"metric: {_metric(found)}" + (
        f"; early stop: {found['early_stop']}" if found.get("early_stop") else ""
    ))  # fmt: skip
    rows = []
    for rank, trial in enumerate(found["trials"], 1):
        ranked = str(rank) if trial["best"] is not None else "-"
        rows.append([
            ranked, trial["task"], _params(trial["params"]), _num(trial["best"]),
            _num(trial["last"]), "-" if trial["step"] is None else str(trial["step"]),
            trial["state"] or "GONE", trial["reason"] or "",
        ])  # fmt: skip
    print(table(["RANK", "TRIAL", "PARAMS", "BEST", "LAST", "STEP", "STATE", "REASON"], rows))


def _metric(s: dict[str, Any]) -> str:
    return f"{s['metric']} ({s['goal']})" if s.get("metric") else "-"


def _states(states: dict[str, int]) -> str:
    return " ".join(f"{n} {state}" for state, n in sorted(states.items())) or "-"


def _params(params: dict[str, Any]) -> str:
    from gpuyard.domain.sweep import value_text

    text = " ".join(f"{k}={value_text(v)}" for k, v in params.items())
    return text if len(text) <= _PARAMS_WIDTH else text[: _PARAMS_WIDTH - 3] + "..."


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"
