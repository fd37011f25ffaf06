"""sbatch's directives: every script of the corpus (tests/data/sbatch/, written in the styles
people publish) reads into the job it asks for, with a warning for each directive that means
nothing here; the command line wins over the script, as sbatch's does."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from gpuyard.cli.commands import SubmitOptions
from gpuyard.cli.submitting import apply_batch, build_submission
from gpuyard.domain.errors import InvalidRequest
from gpuyard.domain.sbatch import merge, parse_directives, resolve

CORPUS = Path(__file__).parent.parent / "data" / "sbatch"

# script -> (the submission's fields, (chdir, export), warnings as (line, start of message))
EXPECTED: dict[str, tuple[dict[str, Any], tuple[Any, Any], list[tuple[int, str]]]] = {
    "torchrun_single_node.sh": (
        {"gpus": 8, "nodes": 1, "ntasks_per_node": 1,
         "ntasks_given": True, "cpus": 32, "mem": "256G", "priority": 0,
         "time_limit": "24:00:00", "name": "llama-ft", "output_path": "logs/%x-%j.out",
         "error_path": "logs/%x-%j.err"},
        (None, ("default", ())), []),
    "torchrun_multi_node.sh": (
        {"gpus": 32, "nodes": 4, "ntasks_per_node": 1,
         "ntasks_given": True, "cpus": 256, "mem": "0M", "priority": 0,
         "time_limit": "2-00:00:00", "name": "pretrain-gpt", "output_path": "%x-%j.out"},
        (None, ("default", ())),
        [(3, "--partition=gpu ignored"), (3, "--qos=high ignored"), (3, "--account=lab ignored"),
         (9, "--exclusive ignored")]),
    "accelerate_single_node.sh": (
        {"gpus": 4, "nodes": 1, "cpus": 16, "mem": "128G", "priority": 0,
         "time_limit": "12:00:00", "name": "sd-lora", "output_path": "%x_%j.log",
         "gpu_type": "a100"},
        (None, ("default", ())), []),
    "accelerate_multi_node.sh": (
        # --mem-per-gpu 64G x 4 GPUs per node x 2 nodes
        {"gpus": 8, "nodes": 2, "ntasks_per_node": 1,
         "ntasks_given": True, "cpus": 96, "mem": "524288M",
         "priority": 0, "time_limit": "08:00:00", "name": "accel-2n",
         "output_path": "slurm/%j/out.txt"},
        (None, ("default", ())), []),
    "deepspeed_zero3.sh": (
        # --mem-per-cpu 8G x (8 tasks x 10 CPUs) per node x 2 nodes
        {"gpus": 16, "nodes": 2, "ntasks_per_node": 8,
         "ntasks_given": True, "cpus": 160, "mem": "1310720M",
         "priority": 0, "time_limit": "3-00:00:00", "name": "ds-zero3",
         "output_path": "ds-%j.out", "preemptible": True, "warn_signal": "USR1",
         "warn_before_s": 300, "warn_target": "batch"},
        (None, ("default", ())), []),
    "lightning_multi_node.sh": (
        {"gpus": 8, "nodes": 2, "ntasks_per_node": 4,
         "ntasks_given": True, "cpus": 64, "mem": "409600M",
         "priority": 0, "time_limit": "0-08:00:00", "name": "pl-resnet",
         "warn_signal": "SIGUSR1", "warn_before_s": 90, "warn_target": "steps"},
        (None, ("default", ())), []),
    "lightning_single_node.sh": (
        # -n 4 on one node; --mem-per-gpu 40G x 4
        {"gpus": 4, "ntasks_per_node": 4,
         "ntasks_given": True, "cpus": 24, "mem": "163840M", "priority": 0,
         "time_limit": "360", "name": "vit-base", "preemptible": True, "warn_signal": "USR1",
         "warn_before_s": 120, "warn_target": "steps"},
        (None, ("default", ())), []),
    "array_sweep.sh": (
        {"gpus": 1, "cpus": 4, "mem": "16G", "priority": 0, "time_limit": "2:00:00",
         "name": "lr-sweep", "output_path": "logs/sweep_%A_%a.out",
         "error_path": "logs/sweep_%A_%a.err", "array": "0-31%4"},
        (None, ("default", ())), []),
    "array_list.sh": (
        {"gpus": 1, "cpus": 1, "priority": 0, "time_limit": "45", "name": "eval-ckpt",
         "output_path": "eval-%a.txt", "array": "1,3,5,7"},
        (None, ("default", ())), []),
    "dependency_eval.sh": (
        {"gpus": 1, "cpus": 1, "priority": 0, "time_limit": "30:00", "name": "final-eval",
         "output_path": "eval-%j.out", "dependency": "afterok:1234"},
        (None, ("default", ())), [(5, "--kill-on-invalid-dep=yes ignored")]),
    "mail_notify.sh": (
        {"gpus": 2, "cpus": 1, "priority": 0, "time_limit": "1-12", "name": "bert-pretrain",
         "gpu_type": "v100", "notify_events": ["begin", "end", "fail"]},
        (None, ("default", ())),
        [(6, "--mail-user=someone@university.example: gpuyard sends no mail")]),
    "export_env.sh": (
        {"gpus": 2, "cpus": 1, "priority": 0, "time_limit": "04:00:00", "name": "hf-offline"},
        ("runs/exp1", ("all", ("WANDB_MODE=offline", "HF_HOME=/scratch/hf"))),
        [(6, "--open-mode=append ignored")]),
    "gpuyard_extras.sh": (
        # #GPUYARD --time 2h wins over #SBATCH --time
        {"gpus": 1, "cpus": 1, "priority": 0, "time_limit": "2h", "name": "small-finetune",
         "venv": "/opt/venvs/ml", "gpu_mem": "20G", "stop_signal": "USR1", "retries": 2,
         "retry_on": ["failed", "timeout"], "notify": ["https://hooks.example.org/gpu-jobs"],
         "notify_events": ["end"]},
        (None, ("default", ())), []),
    "unknown_directives.sh": (
        # --nice=10 lowers the priority; the directive after the first command is not read
        {"gpus": 2, "cpus": 1, "priority": -10, "time_limit": "1:00:00"},
        (None, ("default", ())),
        [(2, "--partition=gpu ignored"), (2, "--qos=high ignored"), (2, "--account=lab ignored"),
         (4, "--constraint=a100|h100 ignored"), (6, "unknown option --frobnicate=7: ignored"),
         (7, "--hint=nomultithread ignored"), (8, "--comment=ablation, see notes ignored")]),
    "jax_multihost.sh": (
        # --gpus-per-task 1 x 4 tasks per node x 2 nodes
        {"gpus": 8, "nodes": 2, "ntasks_per_node": 4, "ntasks_given": True, "gpus_per_task": 1,
         "cpus": 64, "mem": "0M", "priority": 0, "time_limit": "04:00:00", "name": "jax-mh"},
        (None, ("default", ())), []),
    "hf_trainer_long.sh": (
        # --time=UNLIMITED: no limit; --no-requeue: never preempted
        {"gpus": 2, "cpus": 1, "mem": "64000", "priority": 0, "name": "hf-trainer",
         "gpu_type": "a100", "preemptible": False},
        (None, ("none", ())), []),
    "cpu_preprocess.sh": (
        {"gpus": 0, "cpus": 16, "mem": "65536M", "priority": 0, "time_limit": "1:00:00",
         "name": "tokenize", "dependency": "singleton"},
        (None, ("default", ())), []),
}  # fmt: skip


def test_the_corpus_is_the_expected_one() -> None:
    assert sorted(p.name for p in CORPUS.glob("*.sh")) == sorted(EXPECTED)
    assert len(EXPECTED) >= 15


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_corpus_script_reads_into_the_job_it_asks_for(name: str) -> None:
    fields, (chdir, export), warnings = EXPECTED[name]
    found = parse_directives((CORPUS / name).read_text(), name)
    resolved = resolve(found.values)
    assert resolved.fields == fields
    assert (resolved.chdir, resolved.export) == (chdir, export)
    assert resolved.notes == []
    assert len(found.warnings) == len(warnings), found.warnings
    for warning, (line, start) in zip(found.warnings, warnings, strict=True):
        assert warning.line == line and warning.message.startswith(start), warning
        assert "\n" not in warning.message


def test_directives_end_at_the_first_command_and_commented_ones_are_not_read() -> None:
    text = (
        "#!/bin/bash\n\n# a comment\n#SBATCH -t 5\n## SBATCH -G 8\n# SBATCH -G 8\n"
        "echo x\n#SBATCH -G 2\n"
    )
    assert parse_directives(text).values == {"time": "5"}


def test_option_forms_and_quotes_read_as_sbatch_reads_them() -> None:
    text = ('#!/bin/bash\n#SBATCH -N2 -c 4 --ntasks-per-node 2 -J "my run" -t1:00:00  # x\n'
            "#SBATCH --gpus-per-node=h100:2\n#SBATCH --nodes 3-5\n")  # fmt: skip
    found = parse_directives(text)
    assert found.values == {"nodes": 3, "cpus_per_task": 4, "ntasks_per_node": 2,
                            "name": "my run", "time": "1:00:00", "gpus_per_node": 2,
                            "gpu_type": "h100"}  # fmt: skip
    assert [(w.line, w.message) for w in found.warnings] == [
        (4, "--nodes=3-5: a range; the job takes 3 (its least)")
    ]


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("--time=soon", "job.sh:2: --time=soon: bad duration"),
        ("--gres=gpu:a100:x", "job.sh:2: --gres=gpu:a100:x: give gpu:N or gpu:TYPE:N"),
        ("-N zero", "job.sh:2: --nodes=zero: give a whole number of at least 1"),
        ("--array=5-1", "job.sh:2: --array=5-1: --array '5-1': '5-1' runs backwards"),
        ("--mem=lots", "job.sh:2: --mem=lots: bad size"),
        ("--signal=NOPE@10", "job.sh:2: --signal=NOPE@10: signal 'NOPE' is not a signal"),
        ("--mail-type=SOMETIMES", "job.sh:2: --mail-type=SOMETIMES: --mail-type 'SOMETIMES'"),
        ('--export="A B"', "job.sh:2: --export=A B: 'A B' is not NAME or NAME=VALUE"),
        ("--requeue=yes", "job.sh:2: --requeue=yes: takes no value"),
        ("-t", "job.sh:2: -t needs a value"),
    ],
)
def test_a_value_that_cannot_mean_what_it_says_names_its_line(line: str, said: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_directives(f"#!/bin/bash\n#SBATCH {line}\n", "job.sh")
    assert info.value.message.startswith(said), info.value.message
    assert "\n" not in info.value.message


def test_gres_other_than_gpus_and_strays_are_warnings() -> None:
    found = parse_directives("#!/bin/sh\n#SBATCH --gres=gpu:2,tmpfs:10G stray\n")
    assert found.values == {"gpus_per_node": 2}
    assert [w.message for w in found.warnings] == [
        "--gres=tmpfs:10G ignored: GPUs are the only generic resource here",
        "'stray' is not an option: ignored",
    ]


def test_gpuyard_lines_win_over_sbatch_lines_whatever_their_order() -> None:
    text = "#!/bin/sh\n#GPUYARD --gpus 1\n#SBATCH --gres=gpu:4\n#SBATCH -t 10\n"
    assert resolve(parse_directives(text).values).fields["gpus"] == 1


def test_resolving_totals_and_disagreements() -> None:
    notes = resolve({"ntasks": 5, "nodes": 2, "gpus_per_task": 1})
    assert notes.fields["ntasks_per_node"] == 3 and notes.fields["gpus"] == 6
    assert notes.notes == ["--ntasks=5 over 2 nodes does not split evenly: 3 tasks on each "
                           "node (6 in all)"]  # fmt: skip
    assert resolve({"cpus_per_gpu": 6, "gpus_per_node": 2}).fields["cpus"] == 12
    with pytest.raises(InvalidRequest, match="disagree"):
        resolve({"gpus": 3, "gpus_per_node": 2, "nodes": 2})
    unwarned = resolve({"warn_signal": "USR1", "warn_before_s": 60})
    assert "warn_signal" not in unwarned.fields
    assert unwarned.notes[0].startswith("--signal=USR1@60: the job has no time limit")


def test_a_layer_replaces_the_whole_group_it_sets() -> None:
    script = {"gpus_per_node": 4, "gpu_type": "a100", "mem_per_gpu": "32G", "env": ("A=1",)}
    flags = {"gpus": 2, "mem": "8G", "env": ("B=2",)}
    assert merge(script, flags) == {"gpu_type": "a100", "gpus": 2, "mem": "8G",
                                    "env": ("A=1", "B=2")}  # fmt: skip


def _submit_fields(tmp_path: Path, script: str, **flags: Any) -> tuple[dict[str, Any], str]:
    """The fields `gpuyard submit [flags] job.sh` sends, and what it said on stderr."""
    import contextlib
    import io

    path = tmp_path / "job.sh"
    path.write_text(script)
    opts = SubmitOptions([str(path)], **flags)
    argv, fields = build_submission(opts.command, opts.name, opts.workdir, opts.env,
                                    opts.export_env is not False)  # fmt: skip
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        apply_batch(opts, argv, fields, opts.defaults)
    return fields, err.getvalue()


def test_command_line_flags_override_the_scripts_directives(tmp_path: Path) -> None:
    script = ("#!/bin/bash\n#SBATCH --gres=gpu:a100:4 -c 8 --mem=64G -t 10:00 -J script\n"
              "#SBATCH -o out-%j.txt --requeue --array=0-3 -D sub\n"
              "#SBATCH -p gpu\nrun\n")  # fmt: skip
    fields, said = _submit_fields(
        tmp_path, script, gpus=2, cpus=2, mem="8G", time="5", name="cli", output="cli.out",
        preemptible=False, array="0-1", workdir=str(tmp_path),
    )  # fmt: skip
    assert {k: fields[k] for k in ("gpus", "gpu_type", "cpus", "mem", "time_limit", "name",
                                   "output_path", "preemptible", "array", "workdir")} == {
        "gpus": 2, "gpu_type": "a100", "cpus": 2, "mem": "8G", "time_limit": "5",
        "name": "cli", "output_path": "cli.out", "preemptible": False, "array": "0-1",
        "workdir": str(tmp_path)}  # fmt: skip
    where = tmp_path / "job.sh"
    assert said == f"gpuyard: warning: {where}:4: -p gpu ignored: one queue per server here\n"
    kept, _ = _submit_fields(tmp_path, script)
    assert (kept["gpus"], kept["name"], kept["workdir"]) == (4, "script", os.path.abspath("sub"))
    assert kept["env"]["SLURM_SUBMIT_DIR"] == os.getcwd()


def test_export_builds_the_jobs_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                            ) -> None:  # fmt: skip
    monkeypatch.setenv("DATA_DIR", "/data")
    monkeypatch.setenv("GPUYARD_TOKEN", "secret")
    everything, _ = _submit_fields(tmp_path, "#!/bin/sh\n#SBATCH --export=ALL,A=1\nx\n")
    assert everything["env"]["DATA_DIR"] == "/data" and everything["env"]["A"] == "1"
    assert "GPUYARD_TOKEN" not in everything["env"]
    named, _ = _submit_fields(tmp_path, "#!/bin/sh\n#SBATCH --export=DATA_DIR,B=2\nx\n",
                              env=["C=3"])  # fmt: skip
    assert named["env"] == {"DATA_DIR": "/data", "B": "2", "C": "3",
                            "SLURM_SUBMIT_DIR": os.getcwd()}  # fmt: skip
    usual, _ = _submit_fields(tmp_path, "#!/bin/sh\nx\n")
    assert "DATA_DIR" not in usual["env"] and usual["env"].get("PATH") == os.environ["PATH"]


def test_mail_user_url_is_a_webhook_and_flags_replace_it(tmp_path: Path) -> None:
    script = "#!/bin/sh\n#SBATCH --mail-type=ALL --mail-user=https://h.example/a\nx\n"
    fields, said = _submit_fields(tmp_path, script)
    assert fields["notify"] == ["https://h.example/a"] and said == ""
    assert fields["notify_events"] == ["begin", "end", "fail", "requeue", "cancel"]
    fields, _ = _submit_fields(tmp_path, script, notify=["https://h.example/b"],
                               mail_type="END")  # fmt: skip
    assert fields["notify"] == ["https://h.example/b"] and fields["notify_events"] == ["end"]


def test_gpuyards_cpus_and_mem_stay_the_jobs_totals_on_any_node_count(tmp_path: Path) -> None:
    """`--cpus 4 --mem 8G --nodes 2`: 4 cores and 8 GiB in all, as before (split over the
    nodes); a script's --cpus-per-task and --mem are per task and per node (sbatch's)."""
    script = "#!/bin/sh\n#SBATCH -N 2 --gpus-per-node=1 -c 3 --mem=2G\nx\n"
    fields, _ = _submit_fields(tmp_path, script)
    assert (fields["cpus"], fields["mem"], fields["gpus"]) == (6, "4096M", 2)
    fields, _ = _submit_fields(tmp_path, script, cpus=4, mem="8G")
    assert (fields["cpus"], fields["mem"], fields["nodes"]) == (4, "8G", 2)


def test_a_heterogeneous_job_reads_its_first_component_only() -> None:
    text = "#!/bin/sh\n#SBATCH -G 1\n#SBATCH hetjob\n#SBATCH -G 4\n#GPUYARD --retries 1\nx\n"
    found = parse_directives(text)
    assert found.values == {"gpus": 1, "retries": 1}
    assert [w.line for w in found.warnings] == [3]


def test_python_and_venv_become_this_machines_absolute_paths(tmp_path: Path) -> None:
    import shutil

    fields, _ = _submit_fields(tmp_path, "#!/bin/sh\n#GPUYARD --python sh\nx\n")
    assert fields["python"] == shutil.which("sh")
    fields, _ = _submit_fields(tmp_path, "#!/bin/sh\nx\n", venv=".venv")
    assert fields["venv"] == os.path.abspath(".venv")
