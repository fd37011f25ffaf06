"""`gpuyard doctor --node NAME` and `--all`: other machines of the server, each checked by the
facts its own agent gathered there (`GET /api/v1/nodes/{name}/doctor`, admins), judged here by
the same `doctor.checks` as this machine's."""

from __future__ import annotations

import json
import sys
from typing import Any

from gpuyard.cli.doctoring import check_line, json_summary
from gpuyard.client import Client
from gpuyard.doctor.checks import run_checks
from gpuyard.doctor.model import Check, Status, summarize
from gpuyard.doctor.wire import facts_from_json
from gpuyard.domain.errors import GpuyardError


def run_node_doctor(client: Client, name: str, json_out: bool) -> int:
    """One machine's checks, under a line naming it; 1 if any FAILed. Raises GpuyardError
    (one line) for an unknown machine, one that does not answer, or a caller not an admin."""
    with client:
        checks, summary = _judged(client, name)
    if json_out:
        sys.stdout.write(json.dumps(_node_json(name, checks, summary), indent=2) + "\n")
    else:
        sys.stdout.write(f"machine {name}:\n" + "".join(check_line(c) + "\n" for c in checks))
    return 1 if any(c.status is Status.FAIL for c in checks) else 0


def run_all_doctor(client: Client, json_out: bool) -> int:
    """Every machine of `gpuyard nodes`, in its order: a summary line each, then its WARN and
    FAIL checks; a machine that does not answer is a FAIL. 1 if anything FAILed anywhere."""
    out: list[dict[str, Any]] = []
    failed = False
    with client:
        for node in client.nodes():
            name = str(node["name"])
            try:
                checks, summary = _judged(client, name)
            except GpuyardError as exc:
                if exc.code in ("forbidden", "unauthorized"):
                    raise
                checks, summary = [Check("agent", Status.FAIL, exc.message)], None
            failed = failed or any(c.status is Status.FAIL for c in checks)
            out.append(_node_json(name, checks, summary))
            if not json_out:
                sys.stdout.write(_summary_line(name, checks) + "\n")
                shown = [c for c in checks if c.status in (Status.WARN, Status.FAIL)]
                sys.stdout.write("".join(f"  {check_line(c)}\n" for c in shown))
    if json_out:
        sys.stdout.write(json.dumps({"nodes": out}, indent=2) + "\n")
    elif out:
        sys.stdout.write("every check of one machine: `gpuyard doctor --node NAME`\n")
    return 1 if failed else 0


def _judged(client: Client, name: str) -> tuple[list[Check], dict[str, Any]]:
    facts = facts_from_json(client.node_doctor(name)["facts"])
    checks = run_checks(facts)
    return checks, json_summary(facts, checks)


def _summary_line(name: str, checks: list[Check]) -> str:
    counts = summarize(checks)
    verdict = "FAIL" if counts[Status.FAIL.value] else "WARN" if counts[Status.WARN.value] else "ok"
    return (
        f"{verdict:<4}  {name}: {counts['pass']} pass, {counts['warn']} warn, "
        f"{counts['fail']} fail, {counts['info']} info"
    )


def _node_json(name: str, checks: list[Check], summary: dict[str, Any] | None) -> dict[str, Any]:
    summary = summary if summary is not None else dict(summarize(checks))
    return {"node": name, "checks": [c.to_json() for c in checks], "summary": summary}
