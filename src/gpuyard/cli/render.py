"""Plain-text tables and records, like squeue/scontrol print them: fast to import, easy to grep."""

from __future__ import annotations

from gpuyard.domain.units import format_duration, format_size_mib

TYPE_CHECKING = False  # typing stays unimported on the CLI's start path (~2 ms)
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any


def printable(text: str) -> str:
    """Control characters as escapes (`\\n`, `\\x1b`): what a job or a user named cannot move
    the viewer's cursor, clear their screen or break a table's rows."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    rows = [[printable(cell) for cell in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


def gpu_list(gpus: Sequence[int]) -> str:
    return ",".join(map(str, gpus)) if gpus else "-"


def queue_rows(jobs: Sequence[dict[str, Any]]) -> str:
    from gpuyard.cli.job_refs import label  # `12_3` for an array's task
    from gpuyard.cli.service_format import service_note

    rows = []
    for job in jobs:
        pending = job["state"] == "PENDING"
        where = f"({job['reason'] or 'None'})" if pending else gpu_list(job["gpus"])
        if pending and job.get("rank"):  # its place in the policy's order: `(Priority) 3/12`
            where = f"{where} {job['rank']}/{job['rank_among']}"
        if job["state"] not in ("PENDING", "RUNNING") and job["reason"] not in (None, "None"):
            where = f"{gpu_list(job['gpus'])} ({job['reason']})"
        if job.get("idle_since"):
            where = f"{where} (idle since {_local(job['idle_since'], short=True)})"
        if job.get("kind") == "service":  # `(service :PORT healthy)`
            where = f"{where} {service_note(job)}"
        rows.append(
            [
                label(job),
                _clip(job["name"], 24),
                job["owner"],
                shown_state(job),
                _gpus_asked(job),
                format_duration(job["runtime_s"]) if job["runtime_s"] is not None else "0:00",
                format_duration(job["time_limit_s"]) if job["time_limit_s"] else "UNLIMITED",
                "yes" if job.get("preemptible") else "no",
                _start(job),
                "-" if pending else job.get("node") or "-",
                where,
            ]
        )
    return table(["JOBID", "NAME", "USER", "STATE", "GPUS", "TIME", "TIME_LIMIT", "PREEMPT",
                  "START", "NODE", "GPU_IDS(REASON)"], rows)  # fmt: skip


def _array_fields(job: dict[str, Any]) -> list[tuple[str, object]]:
    """An array's task: its array (%A) and index (%a), as scontrol shows them."""
    if job.get("array_job_id") is None:
        return []
    cap = job.get("array_max_running") or 0
    return [
        ("ArrayJobId", job["array_job_id"]),
        ("ArrayTaskId", f"{job['array_task_id']}" + (f" (at most {cap} running)" if cap else "")),
    ]


def shown_state(job: dict[str, Any]) -> str:
    """CANCELLING/COMPLETING while a stopped job's processes exit (older servers: the state)."""
    return str(job.get("display_state") or job["state"])


def _gpus_asked(job: dict[str, Any]) -> str:
    """`2`, or `1x8G` for a job sharing GPUs (1 GPU, 8 GiB of it)."""
    mib = job.get("gpu_mem_mib")
    return f"{job['num_gpus']}x{format_size_mib(mib)}" if mib else str(job["num_gpus"])


def _start(job: dict[str, Any]) -> str:
    """Start time; for a pending job the estimate (`~`), marked `(preemption)` when it holds
    only if the scheduler preempts a running job, or `?` when none can be made."""
    if job["state"] == "PENDING":
        estimate = job.get("estimated_start_at")
        if not estimate:
            return "?"
        assumes = " (preemption)" if job.get("estimate_assumes") == "preemption" else ""
        return f"~{_local(estimate, short=True)}{assumes}"
    return _local(job["started_at"], short=True)


def _preemptible(job: dict[str, Any]) -> str:
    if job["preemptible"]:
        return "yes (the scheduler may stop it to run another job; it is requeued)"
    return "no (never stopped for another job; --preemptible to allow it)"


def _stop_signal(job: dict[str, Any]) -> str:
    from gpuyard.domain.signals import signal_name

    return f"{signal_name(int(job.get('stop_signal') or 15))}, SIGKILL after the grace period"


# How an earlier run ended -> what its requeue was, for `show`'s Restarts line.
_REQUEUED_AS = {"PENDING": "preempted and requeued", "NODE_FAIL": "requeued after a node failure"}


def _restarts(job: dict[str, Any]) -> str:
    """`2 (retried 1 time, preempted and requeued 1 time)`, from the attempts it kept."""
    count = job["restarts"]
    if not count:
        return "0"
    kinds: dict[str, int] = {}
    for attempt in job.get("attempts") or []:
        kind = _REQUEUED_AS.get(attempt["state"], "retried")
        kinds[kind] = kinds.get(kind, 0) + 1
    if sum(kinds.values()) != count:  # runs from before attempts were kept
        kinds = {"requeued": count}
    parts = [f"{kind} {n} time{'s' if n > 1 else ''}" for kind, n in kinds.items()]
    return f"{count} ({', '.join(parts)})"


def _retries(job: dict[str, Any]) -> str:
    retries = job.get("retries") or 0
    if not retries:
        return "no (--retries N requeues a failed run)"
    on = ",".join(job.get("retry_on") or []) or "failed"
    used = sum(1 for a in job.get("attempts") or [] if a["state"] not in _REQUEUED_AS)
    return f"{retries} on {on}, {used} used"


def _begin(job: dict[str, Any]) -> str:
    """A pending retry's backoff: when it may start again."""
    return _zoned(job.get("not_before")) if job["state"] == "PENDING" else "-"


def attempt_rows(job: dict[str, Any]) -> str:
    """`show`'s runs of a job that was run again: its earlier runs (retries, node failures,
    preemptions) and the current or last one, as sacct lists a requeued job's runs."""
    attempts = job.get("attempts") or []
    if not attempts:
        return ""
    rows = [_attempt_row(a) for a in attempts]
    if job.get("started_at"):
        current = {
            "number": attempts[-1]["number"] + 1, "started_at": job["started_at"],
            "ended_at": job["ended_at"], "state": shown_state(job),
            "exit_code": job["exit_code"], "node": job["node"], "gpus": job["gpus"],
            "reason": job["reason"] if job["state"] != "RUNNING" else None,
        }  # fmt: skip
        rows.append(_attempt_row(current))
    headers = ["RUN", "START", "END", "STATE", "EXIT", "NODE", "GPU_IDS", "REASON"]
    return "Attempts:\n" + "\n".join(f"  {line}" for line in table(headers, rows).split("\n"))


def _attempt_row(a: dict[str, Any]) -> list[str]:
    return [
        str(a["number"]), _zoned(a["started_at"]), _zoned(a["ended_at"]), a["state"],
        "-" if a["exit_code"] is None else str(a["exit_code"]), a["node"] or "-",
        gpu_list(a["gpus"]), "" if a["reason"] in (None, "None") else a["reason"],
    ]  # fmt: skip


def dry_run_answer(answer: dict[str, Any]) -> str:
    """`submit --dry-run`'s answer: when it would start, then, when the server knows, how long
    it would run ("once started: expected 40 min ..., from your last 5 runs of this size")."""
    start = _dry_run_start(answer)
    expected = answer.get("expected_run")
    return f"{start}\nonce started: {expected}" if expected else start


def _dry_run_start(answer: dict[str, Any]) -> str:
    """One line naming what it would wait for (the server's `waits_for`: the resource that
    binds now) and the ends its estimate counts on."""
    seconds, binds = answer["starts_in_s"], answer.get("waits_for")
    waits = (f"it waits for {binds}" if binds
             else "it fits now, but jobs queued ahead of it go first")  # fmt: skip
    if seconds is None and answer.get("not_before"):
        return (f"the job fits this server; it would not start before "
                f"{_local(answer['not_before'])}: {waits} (the projection of a deep queue "
                "stopped there; nothing was queued)")  # fmt: skip
    if seconds is None:
        held = "held" if binds else "who wait"
        return (f"the job fits this server, but no start can be estimated: {waits}, {held} "
                "by jobs without a time limit (nothing was queued)")  # fmt: skip
    if seconds < 1:
        return "the job would start now (nothing was queued)"
    assumes = ("if the scheduler preempts a running job then, as it plans to"
               if answer.get("estimate_assumes") == "preemption"
               else "if running jobs use their whole time limit")  # fmt: skip
    ends = answer.get("after_jobs") or []
    if ends:
        many = len(ends) > 1
        waits += f" until job{'s' * many} {', '.join(map(str, ends))} end{'' if many else 's'}"
    return (f"the job would start in about {format_duration(seconds)}, at "
            f"{_local(answer['start_at'])}: {waits}, {assumes} (nothing was queued)")  # fmt: skip


def test_only_line(answer: dict[str, Any], fields: dict[str, Any]) -> str:
    """`sbatch --test-only`'s line, in Slurm's words: when the job would start (the dry run's
    estimate, local time as Slurm writes it; `Unknown`: none can be made), its CPUs, the
    node, the partition. Nothing is queued, so no job id is given yet: Slurm's is `0` here."""
    import socket
    from datetime import datetime

    when = answer.get("start_at") or answer.get("not_before")
    start = (datetime.fromisoformat(when).astimezone().strftime("%Y-%m-%dT%H:%M:%S")
             if when else "Unknown")  # fmt: skip
    cpus = fields.get("cpus") or 1
    return (
        f"sbatch: Job 0 to start at {start} using {cpus} processors on nodes "
        f"{socket.gethostname()} in partition gpuyard"
    )


def job_record(job: dict[str, Any], charts: Sequence[tuple[str, object]] = ()) -> str:
    """scontrol's record of a job; `charts`: its progress and sparklines (`chart_fields`),
    shown after RunTime when there are any."""
    from gpuyard.cli.service_format import service_fields

    fields = [
        ("JobId", job["id"]),
        *_array_fields(job),
        ("Name", job["name"]),
        ("User", job["owner"]),
        ("State", shown_state(job)),
        ("Reason", job["reason"] or "None"),  # null: none (scontrol's word)
        ("ExitCode", "-" if job["exit_code"] is None else job["exit_code"]),
        ("Priority", job["priority"]),
        ("Preemptible", _preemptible(job)),
        ("StopSignal", _stop_signal(job)),
        ("Distributed", job.get("distributed") or "no"),
        ("Restarts", _restarts(job)),
        ("Retries", _retries(job)),
        ("BeginTime", _begin(job)),  # a retry's backoff (reason BeginTime)
        ("RestartOf", job.get("restart_of") or "-"),  # gpuyard restart: the job it reruns
        ("GpuTime", f"{job['attained_gpu_s'] / 3600:.2f} GPU-hours, all runs"),
        *gpu_stats_fields(job),
        ("Command", " ".join(_quote(a) for a in job["command"])),
        ("WorkDir", job["workdir"]),
        ("GPUs", f"{job['num_gpus']} requested, held: {gpu_list(job['gpus'])}"),
        ("GpuMem", _gpu_mem(job)),
        ("CPUs", job["cpus"]),
        ("Mem", format_size_mib(job["mem_mib"])),
        ("TimeLimit", format_duration(job["time_limit_s"]) if job["time_limit_s"] else "UNLIMITED"),
        *_expected_run(job),
        *rank_fields(job),
        ("Node", job["node"] or "-"),  # "" until its first start
        ("SubmitTime", _zoned(job["submitted_at"])),
        ("StartTime", _zoned(job["started_at"])),
        ("EstimatedStart", _estimate(job)),
        (
            "Idle",
            f"GPUs unused since {_zoned(job['idle_since'])}" if job.get("idle_since") else "no",
        ),
        ("EndTime", _zoned(job["ended_at"])),
        ("RunTime", format_duration(job["runtime_s"])),
        *_used(job),
        *service_fields(job, _zoned),
        *charts,
        ("Log", job["log_path"] + _log_lost(job.get("log_dropped_bytes") or 0)),
    ]
    width = max(len(k) for k, _ in fields)
    record = "\n".join(f"{k.rjust(width)}: {printable(str(v))}" for k, v in fields)
    runs = attempt_rows(job)
    return f"{record}\n{runs}" if runs else record


def _used(job: dict[str, Any]) -> list[tuple[str, str]]:
    """What its last run's processes used (sacct's MaxRSS, TotalCPU), once it has ended."""
    rss, cpu = job.get("max_rss_kib"), job.get("cpu_time_s")
    if rss is None and cpu is None:
        return []
    peak = format_size_mib(rss // 1024) if rss is not None else "-"
    spent = format_duration(cpu) if cpu is not None else "-"
    return [("Used", f"{peak} peak resident memory (one process), {spent} of CPU (all)")]


def _log_lost(dropped: int) -> str:
    """What the log did not keep (the job ran on; a line in the log says where and why: the
    disk was full, or the output reached its budget or the disk's reserve)."""
    return f", log truncated ({dropped} bytes not kept: see the line in the log)" if dropped else ""


NA = "n/a"
BAR_WIDTH = 10


def bar(pct: float | None, width: int = BAR_WIDTH) -> str:
    """`███░░░░░░░`: a share drawn in whole cells; n/a is blank."""
    if pct is None:
        return " " * width
    full = round(max(0.0, min(100.0, pct)) / 100 * width)
    return "█" * full + "░" * (width - full)


def gpu_rows(gpus: Sequence[dict[str, Any]]) -> str:
    """The GPU table of `gpuyard gpus` (nvitop/gpustat-like), with processes under each GPU;
    a NODE column when the GPUs are on several machines (Ray backend). VENDOR: nvidia or amd
    and the GPU's architecture."""
    several = len({g.get("node") for g in gpus}) > 1
    rows = [
        [
            *([g.get("node") or "-"] if several else []),
            str(g["index"]),
            _clip(g["name"], 24),
            _vendor(g),
            _util(g),
            _memory(g),
            _num(g.get("temperature_c"), "C"),
            _power(g),
            _holder(g),
            "detected" if g["detected"] else "declared",
        ]
        for g in gpus
    ]
    header = ["GPU", "NAME", "VENDOR", "UTIL", "MEMORY", "TEMP", "POWER", "JOB", "SOURCE"]
    lines = table((["NODE"] if several else []) + header, rows).split("\n")
    out = [lines[0]]
    for gpu, line in zip(gpus, lines[1:], strict=True):
        out.append(line)
        out.extend(f"    {printable(note)}" for note in gpu_notes(gpu))
    return "\n".join(out)


def gpu_notes(g: dict[str, Any]) -> list[str]:
    """Lines under a GPU: its processes (and their jobs), and anything wrong with it."""
    notes = []
    if g.get("drained"):
        notes.append(f"! DRAINED: {g['drain_reason']} (gpuyard admin resume {g['index']})")
    if g.get("hot"):
        notes.append(f"! hot: {g['hot']}; new jobs go to a cool GPU first")
    if g.get("shared_free_mib") is not None:
        notes.append(f"shared (--gpu-mem): {format_size_mib(g['shared_free_mib'])} free to share")
    if g.get("error"):
        return [*notes, f"! cannot read this GPU: {g['error']}"]
    for proc in g.get("processes") or []:
        owner = (f"job {proc['job']} ({proc['user']})" if proc["job"] is not None
                 else "not a gpuyard job")  # fmt: skip
        if proc.get("misplaced"):
            owner += " ! on a GPU not allocated to that job"
        notes.append(f"pid {proc['pid']:<8} {format_size_mib(proc['memory_used_mib']):>6}  {owner}")
    reasons = [r for r in g.get("throttle_reasons") or [] if r != "gpu_idle"]
    if reasons:
        notes.append(f"! clocks held back: {', '.join(reasons)}")
    if g.get("ecc_errors_uncorrected"):
        notes.append(f"! {g['ecc_errors_uncorrected']} uncorrected ECC errors")
    if g.get("xid_errors"):
        notes.append(f"! {g['xid_errors']} XID errors, last XID {g['last_xid']}")
    return notes


def _vendor(g: dict[str, Any]) -> str:
    """The vendor and architecture ("amd gfx942", "nvidia 9.0"); "-" for a declared GPU."""
    return " ".join(p for p in (g.get("vendor"), g.get("arch")) if p) or "-"


def _util(g: dict[str, Any]) -> str:
    pct = g.get("util_pct")
    return f"{bar(pct)} {NA if pct is None else f'{pct}%':>4}"


def _memory(g: dict[str, Any]) -> str:
    used, total = g.get("memory_used_mib"), g.get("memory_total_mib")
    if used is None:
        return f"{bar(None)} {NA}/{format_size_mib(total)}" if total else f"{bar(None)} {NA}"
    pct = 100 * used / total if total else None
    return f"{bar(pct)} {used / 1024:.1f}/{(total or 0) / 1024:.1f}G"


def _power(g: dict[str, Any]) -> str:
    draw, limit = g.get("power_w"), g.get("power_limit_w")
    if draw is None:
        return NA
    return f"{draw:.0f}W" if limit is None else f"{draw:.0f}/{limit:.0f}W"


def _holder(g: dict[str, Any]) -> str:
    jobs = g.get("jobs") or ([] if g["job"] is None else [g["job"]])
    if len(jobs) > 1:  # a GPU shared by --gpu-mem jobs
        return ",".join(map(str, jobs))
    return "-" if not jobs else f"{jobs[0]} {g.get('user') or ''}".rstrip()


def _gpu_mem(job: dict[str, Any]) -> str:
    mib = job.get("gpu_mem_mib") or 0
    if not mib:
        return "whole GPUs" if job["num_gpus"] else "-"
    return f"{format_size_mib(mib)} per GPU (--gpu-mem: may share its GPUs, held to this)"


def _num(value: float | None, unit: str) -> str:
    return NA if value is None else f"{value:.0f}{unit}"


def gpu_stats_fields(job: dict[str, Any]) -> list[tuple[str, object]]:
    """`show`'s GPU-use lines: mean/peak utilisation, peak memory, sampled GPU-hours."""
    stats = job.get("gpu_stats")
    if stats is None:
        return [("GpuUse", "n/a (no GPU telemetry for this job)" if job["num_gpus"] else "-")]
    mean, peak, memory = stats["util_mean_pct"], stats["util_peak_pct"], stats["memory_peak_mib"]
    sampled = format_duration(stats["sampled_s"])
    return [
        ("GpuUtil", NA if mean is None else f"mean {mean:.0f}%, peak {peak}%"),
        ("GpuMemPeak", NA if memory is None else _peak_memory(memory, stats, job)),
        ("GpuHours", f"{stats['gpu_hours']:.3f} (while sampled, {sampled})"),
        ("GpuEnergy", energy_text(stats)),
    ]


def energy_text(stats: dict[str, Any]) -> str:
    """`show`'s energy: kWh and joules, and where the figure came from."""
    joules = stats.get("energy_j")
    if joules is None:
        return f"{NA} (no power reading)"
    how = "power x time" if stats.get("energy_integrated") else "the GPUs' energy counters"
    return f"{joules / 3.6e6:.4f} kWh ({joules:.0f} J, from {how})"


def _peak_memory(total: int, stats: dict[str, Any], job: dict[str, Any]) -> str:
    per_gpu = stats.get("memory_peak_per_gpu_mib")
    text = format_size_mib(total)
    if per_gpu is not None and job["num_gpus"] > 1:
        text += f" (all GPUs), {format_size_mib(per_gpu)} on one GPU"
    return text


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _expected_run(job: dict[str, Any]) -> list[tuple[str, str]]:
    """How long a pending or running job is expected to run (its owner's history), if known."""
    said = job.get("expected_run")
    return [("ExpectedRun", said)] if said else []


def rank_fields(job: dict[str, Any]) -> list[tuple[str, str]]:
    """A pending job's place in the policy's order and the factors of its key (sprio-style):
    `show`'s Rank and RankFactors, which `simulate --explain` prints too."""
    if not job.get("rank_order"):
        return []
    place = f"{job['rank']} of {job['rank_among']}" if job.get("rank") else "not ranked"
    return [("Rank", f"{place} ({job['rank_order']})"), ("RankFactors", job["rank_factors"])]


def _estimate(job: dict[str, Any]) -> str:
    if job["state"] != "PENDING":
        return "-"
    if not job.get("estimated_start_at"):
        return ("unknown (jobs without a time limit hold what it needs, or the queue ahead is "
                "too deep to project)")  # fmt: skip
    if job.get("estimate_assumes") == "preemption":
        return (
            f"{_zoned(job['estimated_start_at'])} if the scheduler preempts a running "
            "job then, as it plans to (and running jobs use their whole time limit)"
        )
    return f"{_zoned(job['estimated_start_at'])} if running jobs use their whole time limit"


def _local(iso: str | None, *, short: bool = False, zone: bool = False) -> str:
    """ISO UTC time in local time; `short` drops today's date; `zone` adds the offset from
    UTC (`2026-12-01T14:03:22+01:00`: a record read elsewhere, or later, stays exact)."""
    if not iso:
        return "-"
    from datetime import datetime  # here: ~1.5 ms on the start path of commands that show none

    when = datetime.fromisoformat(iso).astimezone()
    if short and when.date() == datetime.now().astimezone().date():
        return when.strftime("%H:%M:%S")
    if zone:
        return when.isoformat(timespec="seconds")
    return when.strftime("%Y-%m-%dT%H:%M:%S")


def _zoned(iso: str | None) -> str:
    return _local(iso, zone=True)


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)
