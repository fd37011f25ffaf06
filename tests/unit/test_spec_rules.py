"""The domain's spec rules: defaults decided once, sizes limited at submit with one line each."""

from __future__ import annotations

import pytest

from gpuyard.domain import spec_rules
from gpuyard.domain.errors import InvalidRequest
from gpuyard.domain.spec_rules import SpecDraft, decide_spec

KIB = 1024


def _decide(**fields: object):  # type: ignore[no-untyped-def]
    fields.setdefault("argv", ("python", "train.py"))
    return decide_spec(SpecDraft(**fields), default_workdir="/srv/home")  # type: ignore[arg-type]


def test_defaults_name_from_the_program_and_workdir_from_the_server() -> None:
    spec = _decide(argv=("/usr/bin/python3", "t.py"))  # named after the script it runs
    assert (spec.name, spec.workdir, spec.gpus) == ("t.py", "/srv/home", 0)


def test_what_the_submitter_sent_wins_over_the_default() -> None:
    spec = _decide(name="exp", workdir="/data/client-cwd", gpus=2)
    assert (spec.name, spec.workdir, spec.gpus) == ("exp", "/data/client-cwd", 2)


def test_gpu_mem_implies_one_gpu() -> None:
    assert _decide(gpu_mem_mib=8192).gpus == 1
    assert _decide(gpu_mem_mib=8192, gpus=3).gpus == 3


def test_a_huge_program_name_gives_a_name_within_the_limit() -> None:
    spec = _decide(argv=("x" * 100_000,))
    assert len(spec.name) == spec_rules.MAX_NAME_CHARS


@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        ({"argv": ("echo", "x" * (128 * KIB))}, "command", "longer than the 131,071"),
        ({"argv": ("echo", *["y" * (60 * KIB)] * 3)}, "command", "at most 131,072"),
        ({"argv": ("a\0b",)}, "command", "NUL byte"),
        ({"argv": (" ",)}, "command", "program to run is empty"),
        ({"argv": ()}, "command", "nothing to run"),
        ({"env": (("K", "v" * (128 * KIB)),)}, "env", "for one variable"),
        ({"env": tuple((f"K{i}", "v" * 1000) for i in range(300))}, "env", "at most 262,144"),
        ({"env": tuple((f"K{i}", "") for i in range(5000))}, "env", "at most 4,096"),
        ({"env": (("A=B", "1"),)}, "env", "not a valid variable name"),
        ({"name": "n" * 201}, "name", "at most 200"),
        ({"workdir": "/" + "d" * 5000}, "workdir", "PATH_MAX"),
        ({"workdir": "relative/dir"}, "workdir", "must be an absolute path"),
        ({"cpus": 0}, "cpus", "at least 1"),
        ({"distributed": "mpi", "gpus": 1}, "distributed", "use one of torchrun, jax, tf"),
        ({"distributed": "torchrun"}, "distributed", "one process per GPU"),
        ({"nodes": 2, "gpus": 3}, "nodes", "splits the job's GPUs evenly"),
        ({"nodes": 2, "gpus": 2, "distributed": "tf"}, "distributed", "tf over several nodes"),
        ({"nodes": 2, "gpu_mem_mib": 8192}, "gpu_mem", "cannot be combined with --nodes"),
    ],
)
def test_what_is_refused_says_why_in_one_line(fields: dict[str, object], field: str,
                                              says: str) -> None:  # fmt: skip
    with pytest.raises(InvalidRequest, match=says) as caught:
        _decide(**fields)
    assert caught.value.field == field
    assert "\n" not in caught.value.message and len(caught.value.message) < 200


def test_limits_stay_under_what_exec_accepts() -> None:
    # ARG_MAX is at least 128 KiB per string and 2 MiB in all by default (8 MiB stack / 4);
    # the job's own argv and environment leave room for the server's variables.
    assert spec_rules.MAX_ARG_BYTES < 128 * KIB
    assert spec_rules.MAX_ARGV_BYTES + spec_rules.MAX_ENV_BYTES <= 512 * KIB


def test_the_largest_accepted_command_line_is_accepted() -> None:
    argv = ("echo", "z" * (spec_rules.MAX_ARGV_BYTES - len("echo") - 3))
    assert _decide(argv=argv).argv == argv


def test_a_draft_has_every_spec_field() -> None:
    # decide_spec copies JobSpec's fields from the draft by name: a field missing here would
    # fail every submit.
    from dataclasses import fields

    from gpuyard.domain.job import JobSpec

    assert [f.name for f in fields(SpecDraft)] == [f.name for f in fields(JobSpec)]


@pytest.mark.parametrize("name", ["a\nb", "red\x1b[31m", "nul\x00", "tab\there", "del\x7f"])
def test_a_name_with_control_characters_is_refused_like_the_command(name: str) -> None:
    with pytest.raises(InvalidRequest, match="name: contains a control character") as info:
        _decide(argv=("true",), name=name)
    assert info.value.field == "name"


def test_a_copied_script_is_bounded_and_points_at_an_argument() -> None:
    ok = _decide(argv=("/bin/sh", "/w/job.sh"), script="echo hi\n", script_index=1)
    assert ok.script == "echo hi\n" and ok.script_index == 1
    too_big = "x" * (spec_rules.MAX_SCRIPT_BYTES + 1)
    with pytest.raises(InvalidRequest, match="script: 1,048,577 bytes, at most 1,048,576"):
        _decide(argv=("/bin/sh", "/w/job.sh"), script=too_big, script_index=1)
    with pytest.raises(InvalidRequest, match="script_index 2: not an argument"):
        _decide(argv=("/bin/sh", "/w/job.sh"), script="echo\n", script_index=2)
    with pytest.raises(InvalidRequest, match="NUL"):
        _decide(argv=("/bin/sh", "/w/job.sh"), script="a\0b", script_index=1)


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (["python", "x.py"], "x.py"),  # as sbatch names a job after its script (was "python")
        (["/usr/bin/python3.11", "-u", "-W", "ignore", "train.py", "--lr", "1"], "train.py"),
        (["python3", "-m", "pkg.cli", "serve"], "pkg.cli"),
        (["bash", "./scripts/run.sh"], "run.sh"),
        (["python3", "--", "t.py"], "t.py"),
        (["python3", "-c", "print(1)"], "python3"),  # code, not a script: the interpreter
        (["bash", "-lc", "python t.py"], "bash"),
        (["python3"], "python3"),
        (["./train.sh", "a.py"], "train.sh"),
        (["sshd"], "sshd"),
    ],
)
def test_a_job_is_named_after_the_script_its_interpreter_runs(argv: list[str], name: str) -> None:
    assert spec_rules.default_name(argv) == name
