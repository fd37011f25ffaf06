"""Every CLI table and record shows control characters as escapes: a name or command cannot
break `queue`'s rows or drive the viewer's terminal."""

from __future__ import annotations

from gpuyard.cli.render import job_record, printable, table


def test_printable_escapes_control_characters_and_keeps_the_rest() -> None:
    assert printable("two\nlines\x1b[31m\x00\x7f\u2028") == "two\\nlines\\x1b[31m\\x00\\x7f\\u2028"
    assert printable("naïve 训练 job-1") == "naïve 训练 job-1"


def test_a_table_row_stays_one_line() -> None:
    lines = table(["ID", "NAME"], [["1", "evil\nname\x1b[2J"], ["2", "ok"]]).split("\n")
    assert len(lines) == 3 and "\x1b" not in "".join(lines)
    assert lines[1].split() == ["1", "evil\\nname\\x1b[2J"]


def test_a_record_escapes_its_values() -> None:
    job = {"id": 1, "name": "a\rb", "owner": "me", "state": "PENDING", "reason": "None",
           "exit_code": None, "priority": 0, "preemptible": False, "restarts": 0,
           "attained_gpu_s": 0.0, "command": ["echo", "\x1b]0;title\x07"], "workdir": "/w",
           "num_gpus": 0, "gpus": [], "cpus": 1, "mem_mib": 0, "time_limit_s": None,
           "node": "local", "submitted_at": "2026-12-01T00:00:00+00:00", "started_at": None,
           "ended_at": None, "runtime_s": None, "log_path": "/l"}  # fmt: skip
    record = job_record(job)
    assert "\r" not in record and "\x1b" not in record and "\x07" not in record
    assert "Name: a\\rb" in record


def test_queue_format_escapes_a_jobs_fields_too() -> None:
    from gpuyard.cli.queue_format import format_jobs

    job = {"id": 3, "name": "x\ny\x1b[2J", "state": "PENDING", "reason": "None"}
    lines = format_jobs([job], "%i %j").split("\n")
    assert lines == ["JOBID NAME", "3     x\\ny\\x1b[2J"]


def test_top_s_tables_escape_names_and_never_read_them_as_markup() -> None:
    import io

    from rich.console import Console

    from gpuyard.cli.top import _job_table

    job = {"id": 4, "name": "[bold]x\x1b[2J", "owner": "me\n", "gpus": [0], "runtime_s": 5.0}
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(_job_table([job]))
    text = out.getvalue()
    assert "\x1b" not in text and "[bold]x\\x1b[2J" in text and "me\\n" in text
