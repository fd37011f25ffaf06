"""`gpuyard scontrol` (and `scontrol` by its own name): what tools ask of Slurm's scontrol.

    scontrol show job [N] [-o]        Slurm's key=value record (JobId=12 JobName=train ...)
    scontrol show hostnames [LIST]    node[01-03,7] -> one host a line (SLURM_JOB_NODELIST)
    scontrol show node [NAME]         the machines: CPUs, memory, GPUs as Gres, state
    scontrol hold|release|requeue N[,N...]
    scontrol update JobId=N TimeLimit=2:00:00

Tools (submitit, workflow managers, a lab's scripts) parse these by key, so the keys and the
way values are written are Slurm's (times `2026-01-02T10:00:00`, limits `01:00:00`, unset
`Unknown`/`(null)`); what gpuyard has no counterpart for is left out, never made up. Standard
library only: the fast start path runs it (`cli/fast.py`), typer only lists it.
"""

from __future__ import annotations

import sys

from gpuyard.cli.session import client

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    JobDict = dict[str, Any]

PARTITION = "gpuyard"  # the server's one queue, as squeue and sacct name it
_USAGE = (
    "scontrol (gpuyard): use 'show job [ID]', 'show hostnames [LIST]', 'show node [NAME]', "
    "'hold|release|requeue ID', 'update JobId=ID TimeLimit=...'"
)
_LONG_STATE = {"CANCELLING": "COMPLETING"}


def scontrol(args: list[str]) -> int:
    """Run one scontrol command line; its exit status (1 with one line on stderr: refused)."""
    words = [a for a in args if a not in ("-o", "--oneliner", "-d", "--details", "-a", "--all")]
    one_line = len(words) != len(args) and any(a in ("-o", "--oneliner") for a in args)
    if not words or words[0] in ("-h", "--help", "help"):
        sys.stdout.write(_USAGE + "\n")
        return 0 if words else 1
    verb, rest = words[0].lower(), words[1:]
    if verb == "show" and rest:
        what = rest[0].lower()
        if what in ("hostnames", "hostname"):
            import os

            listed = rest[1] if len(rest) > 1 else os.environ.get("SLURM_JOB_NODELIST", "")
            for host in expand_hostlist(listed):
                sys.stdout.write(host + "\n")
            return 0
        if what in ("job", "jobs"):
            return _show_jobs(rest[1:], one_line)
        if what in ("node", "nodes"):
            return _show_nodes(rest[1:], one_line)
    if verb in ("hold", "uhold", "release", "requeue") and rest:
        return _verb(verb, rest)
    if verb == "update" and rest:
        return _update(rest)
    return _refuse(_USAGE)


def _refuse(message: str) -> int:
    sys.stderr.write(message + "\n")
    return 1


# -- host lists ---------------------------------------------------------------------------
def expand_hostlist(text: str) -> list[str]:
    """Slurm's host list, expanded: `a,node[01-03,7]` -> a node01 node02 node03 node07."""
    items: list[str] = []
    depth, item = 0, ""
    for char in text + ",":
        depth += (char == "[") - (char == "]")
        if char == "," and depth == 0:
            if item:
                items.append(item)
            item = ""
        else:
            item += char
    hosts: list[str] = []
    for entry in items:
        start, end = entry.find("["), entry.find("]")
        if start < 0 or end < start:
            hosts.append(entry)
            continue
        prefix, body, suffix = entry[:start], entry[start + 1 : end], entry[end + 1 :]
        for part in body.split(","):
            low, dash, high = part.partition("-")
            if dash and low.isdigit() and high.isdigit():
                width = len(low)
                hosts += [f"{prefix}{i:0{width}d}{suffix}" for i in range(int(low), int(high) + 1)]
            else:
                hosts.append(f"{prefix}{part}{suffix}")
    return hosts


# -- values as Slurm writes them ------------------------------------------------------------
def slurm_time(iso: object) -> str:
    """A moment as scontrol writes it: local, to the second; `Unknown` when unset."""
    if not iso:
        return "Unknown"
    from datetime import datetime

    return datetime.fromisoformat(str(iso)).astimezone().strftime("%Y-%m-%dT%H:%M:%S")


def slurm_duration(seconds: float | None) -> str:
    """`01:00:00`, `1-02:03:04`; UNLIMITED for none."""
    if seconds is None:
        return "UNLIMITED"
    total = max(0, int(seconds))
    days, rest = divmod(total, 86400)
    clock = f"{rest // 3600:02d}:{rest // 60 % 60:02d}:{rest % 60:02d}"
    return f"{days}-{clock}" if days else clock


def _uid_of(user: str) -> str:
    import pwd

    try:
        return f"{user}({pwd.getpwnam(user).pw_uid})"
    except KeyError:
        return user


def _exit_code(job: JobDict) -> str:
    code = job.get("exit_code")
    if code is None:
        return "0:0"
    if str(job.get("reason") or "").startswith("Signal:") and code > 128:
        return f"0:{code - 128}"
    return f"{code}:0"


def job_record(job: JobDict) -> list[tuple[str, str]]:
    """The job's scontrol fields, in scontrol's order."""
    state = str(job.get("display_state") or job["state"])
    state = _LONG_STATE.get(state, state)
    reason = str(job.get("reason") or "None")
    if job.get("held") and state == "PENDING":
        reason = "JobHeldUser"
    nodes = int(job.get("nodes") or 1)
    cpus = int(job.get("cpus") or 1)
    mem = int(job.get("mem_mib") or 0)
    gpus = int(job.get("num_gpus") or 0)
    tres = f"cpu={cpus}" + (f",mem={mem}M" if mem else "") + f",node={nodes}"
    tres += f",gres/gpu={gpus}" if gpus else ""
    started, ended = job.get("started_at"), job.get("ended_at")
    start = slurm_time(started or job.get("estimated_start_at"))
    end = slurm_time(ended)
    if started and not ended and job.get("time_limit_s"):
        from datetime import datetime, timedelta

        expected = datetime.fromisoformat(str(started)) + timedelta(seconds=job["time_limit_s"])
        end = slurm_time(expected.isoformat())
    node = str(job.get("node") or "") if started else ""
    fields: list[tuple[str, str]] = [("JobId", str(job["id"]))]
    if job.get("array_job_id") is not None:
        fields += [
            ("ArrayJobId", str(job["array_job_id"])),
            ("ArrayTaskId", str(job["array_task_id"])),
        ]
    fields += [
        ("JobName", str(job["name"])),
        ("UserId", _uid_of(str(job["owner"]))),
        ("Priority", str(job.get("priority", 0))),
        ("JobState", state),
        ("Reason", reason),
        ("Requeue", "1" if job.get("preemptible") else "0"),
        ("Restarts", str(job.get("restarts") or 0)),
        ("BatchFlag", "1"),
        ("ExitCode", _exit_code(job)),
        ("RunTime", slurm_duration(job.get("runtime_s") or 0)),
        ("TimeLimit", slurm_duration(job.get("time_limit_s"))),
        ("SubmitTime", slurm_time(job.get("submitted_at"))),
        ("StartTime", start),
        ("EndTime", end),
        ("Partition", PARTITION),
        ("NodeList", node or "(null)"),
        ("BatchHost", node or "(null)"),
        ("NumNodes", str(nodes)),
        ("NumCPUs", str(cpus)),
        ("NumTasks", str(int(job.get("ntasks_per_node") or 1) * nodes)),
        ("TRES", tres),
        ("MinMemoryNode", f"{mem}M" if mem else "0"),
        ("TresPerNode", f"gres/gpu:{gpus // nodes}" if gpus else "(null)"),
        ("Command", " ".join(str(a) for a in job.get("command") or []) or "(null)"),
        ("WorkDir", str(job.get("workdir") or "")),
        ("StdErr", _output_file(job, job.get("error_path") or job.get("output_path"))),
        ("StdIn", "/dev/null"),
        ("StdOut", _output_file(job, job.get("output_path"))),
    ]
    return fields


def _output_file(job: JobDict, pattern: object) -> str:
    """sbatch's `-o`/`-e` pattern with its `%j %A %a %x %u %%` filled in, in the job's working
    directory; the job's log when it has none."""
    if not pattern:
        return str(job.get("log_path") or "")
    import os
    import re

    array_id = job.get("array_job_id")
    values = {
        "j": job["id"],
        "A": array_id if array_id is not None else job["id"],
        "a": job.get("array_task_id") if array_id is not None else 4294967294,
        "x": job["name"],
        "u": job["owner"],
        "J": job["id"],
        "%": "%",
        "N": job.get("node") or "",
        "n": 0,
        "t": 0,
        "s": "batch",
    }
    path = re.sub(
        r"%(\d*)([jAaxuJNnts%])",
        lambda m: str(values[m.group(2)]).zfill(int(m.group(1) or 0)),
        str(pattern),
    )
    return os.path.join(str(job.get("workdir") or ""), path)


def _write_record(fields: list[tuple[str, str]], lines: list[int], one_line: bool) -> None:
    """Fields as `Key=Value`, broken into scontrol's lines (`lines`: how many fields each
    holds, the first unindented, the rest by three blanks); `-o`: on one line."""
    cells = [f"{key}={value}" for key, value in fields]
    if one_line:
        sys.stdout.write(" ".join(cells) + "\n")
        return
    out, at = [], 0
    for count in lines:
        if at < len(cells):
            out.append(("" if at == 0 else "   ") + " ".join(cells[at : at + count]))
        at += count
    if at < len(cells):
        out += ["   " + cell for cell in cells[at:]]
    sys.stdout.write("\n".join(out) + "\n\n")


def _show_jobs(refs: list[str], one_line: bool) -> int:
    from gpuyard.cli.job_refs import check, split

    session = client()
    jobs: list[JobDict] = []
    if not refs:
        jobs = list(session.jobs())
    for ref in refs:
        for one in ref.split(","):
            try:
                array_id, indices = split(check(one))
            except ValueError as exc:
                return _refuse(f"scontrol: error: {exc}")
            job: JobDict = session.job(array_id)
            if job.get("array_job_id") == job["id"] and indices is not None:
                jobs += [t for t in session.array(array_id) if t["array_task_id"] in indices]
            else:
                jobs.append(job)
    if not jobs and not refs:
        sys.stdout.write("No jobs in the system\n")
    for job in jobs:
        record = job_record(job)
        head = 4 if job.get("array_job_id") is not None else 2
        _write_record(record, [head, 2, 2, 4, 2, 3, 4, 3, 2, 3, 1, 1, 1, 1, 1, 1, 1, 1], one_line)
    return 0


# -- nodes ----------------------------------------------------------------------------------
def nodes_of(session: Any) -> list[dict[str, Any]]:
    """Each machine of the server: name, CPUs, memory (MiB), GPUs, GPUs in use, drained
    GPUs, CPUs and memory the running jobs hold, and Slurm's state word for it."""
    import socket

    info = session.info()
    gpus = list(session.gpus())
    running = [j for j in session.jobs() if j["state"] in ("RUNNING", "CANCELLING")]
    names = sorted({str(g["node"]) for g in gpus if g.get("node")}) or ["local"]
    out = []
    for name in names:
        mine = [g for g in gpus if str(g.get("node") or names[0]) == name]
        jobs = [j for j in running if len(names) == 1 or str(j.get("node")) == name]
        if name == "local":  # one machine's server: the name its jobs run on
            name = next((str(j["node"]) for j in jobs if j.get("node")), socket.gethostname())
        node = {
            "name": name,
            "cpus": int(info["cpus"]) // len(names),
            "mem_mib": int(info["mem_mib"]) // len(names),
            "gpus": len(mine),
            "gpus_used": sum(1 for g in mine if g.get("job") is not None or g.get("jobs")),
            "drained": sum(1 for g in mine if g.get("drained")),
            "cpus_alloc": sum(int(j.get("cpus") or 1) // int(j.get("nodes") or 1) for j in jobs),
            "mem_alloc": sum(int(j.get("mem_mib") or 0) // int(j.get("nodes") or 1) for j in jobs),
            "gpu_name": str(mine[0]["name"]) if mine else "",
            "reason": next((str(g["drain_reason"]) for g in mine if g.get("drain_reason")), ""),
        }
        node["state"] = _node_state(node)
        out.append(node)
    return out


def _node_state(node: dict[str, Any]) -> str:
    if node["gpus"] and node["drained"] == node["gpus"]:
        return "DRAINED"
    busy = node["gpus_used"] + node["cpus_alloc"]
    if not busy:
        return "IDLE"
    full = (node["gpus"] and node["gpus_used"] >= node["gpus"] - node["drained"]) or (
        node["cpus_alloc"] >= node["cpus"]
    )
    return "ALLOCATED" if full else "MIXED"


def _show_nodes(names: list[str], one_line: bool) -> int:
    nodes = nodes_of(client())
    if names:
        wanted = set(expand_hostlist(",".join(names)))
        nodes = [n for n in nodes if n["name"] in wanted]
        if not nodes:
            return _refuse(f"Node {names[0]} not found")
    for node in nodes:
        gres = f"gpu:{node['gpus']}" if node["gpus"] else "(null)"
        cfg = f"cpu={node['cpus']},mem={node['mem_mib']}M,billing={node['cpus']}"
        cfg += f",gres/gpu={node['gpus']}" if node["gpus"] else ""
        alloc = f"cpu={node['cpus_alloc']}" if node["cpus_alloc"] else ""
        if node["mem_alloc"]:
            alloc += f",mem={node['mem_alloc']}M"
        if node["gpus_used"]:
            alloc += f",gres/gpu={node['gpus_used']}"
        fields = [
            ("NodeName", node["name"]),
            ("CPUAlloc", str(node["cpus_alloc"])),
            ("CPUTot", str(node["cpus"])),
            ("Gres", gres),
            ("NodeAddr", node["name"]),
            ("NodeHostName", node["name"]),
            ("RealMemory", str(node["mem_mib"])),
            ("AllocMem", str(node["mem_alloc"])),
            ("State", node["state"]),
            ("Partitions", PARTITION),
            ("CfgTRES", cfg),
            ("AllocTRES", alloc.lstrip(",")),
        ]
        if node["reason"]:
            fields.append(("Reason", node["reason"]))
        _write_record(fields, [1, 2, 1, 2, 2, 1, 1, 1, 1, 1], one_line)
    return 0


# -- verbs ----------------------------------------------------------------------------------
def _job_ids(words: list[str]) -> list[int] | None:
    ids: list[int] = []
    for word in words:
        for part in word.split(","):
            if part.lower().startswith("jobid="):
                part = part[6:]
            if not part.isdigit():
                return None
            ids.append(int(part))
    return ids


def _verb(verb: str, words: list[str]) -> int:
    ids = _job_ids(words)
    if not ids:
        return _refuse(f"scontrol: error: Invalid job id specified: {' '.join(words)}")
    session = client()
    act = {
        "hold": session.hold,
        "uhold": session.hold,
        "release": session.release,
        "requeue": session.requeue,
    }[verb]
    for job_id in ids:
        act(job_id)
    return 0


def _update(words: list[str]) -> int:
    """`update JobId=N TimeLimit=T`: the fields gpuyard's `update` changes (a pending job's
    time limit); any other is refused in one line (Slurm's name for it given back)."""
    given: dict[str, str] = {}
    for word in words:
        key, eq, value = word.partition("=")
        if not eq:
            return _refuse(f"scontrol: error: Invalid input: {word}")
        given[key.lower()] = value
    job_text = given.pop("jobid", None) or given.pop("job", None)
    if not job_text or not job_text.isdigit():
        return _refuse("scontrol: error: update needs JobId=N (scontrol update JobId=12 ...)")
    time_limit = given.pop("timelimit", None)
    if given:
        names = ", ".join(sorted(given))
        return _refuse(
            f"scontrol (gpuyard): cannot update {names} of a job; TimeLimit= is what it changes"
            f" (gpuyard update {job_text} --time/--priority/--gpus)"
        )
    if time_limit is None:
        return _refuse("scontrol: error: nothing to update (TimeLimit=...)")
    client().update(int(job_text), time_limit=time_limit)
    return 0


def register(app: Any, admin: Any) -> None:
    """`gpuyard scontrol ...`, listed by typer; its words are read here, not by typer."""
    from gpuyard.cli.cmd_common import raw_command

    raw_command(
        app,
        "scontrol",
        scontrol,
        "Slurm's scontrol: show job|hostnames|node, hold, release, requeue, update.",
    )
