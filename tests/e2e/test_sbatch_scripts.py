"""Batch scripts written for Slurm, submitted unchanged to a real server: the job queued is the
one their directives ask for, flags win over them, and `gpuyard sbatch` answers as sbatch."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.e2e.server import ServerProcess, wait_ended

CORPUS = Path(__file__).parent.parent / "data" / "sbatch"


@pytest.fixture
def server(tmp_path: Path):  # type: ignore[no-untyped-def]
    """4 declared GPUs of 80 GiB (so --gpu-mem jobs fit), CPUs for the corpus's jobs."""
    srv = ServerProcess(tmp_path / "state", "--gpus", "4", "--cpus", "64", "--kill-grace", "1",
                        "--gpu-mem-per-gpu", "80G")  # fmt: skip
    srv.start()
    yield srv
    srv.stop()
    srv.kill_jobs()


def _show(server: ServerProcess, job_id: str) -> dict:  # type: ignore[type-arg]
    return json.loads(server.cli("show", "--json", job_id).stdout)  # type: ignore[no-any-return]


def _copy(tmp_path: Path, name: str) -> Path:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return Path(shutil.copy(CORPUS / name, work / name))


def test_corpus_scripts_queue_the_jobs_their_directives_ask_for(
    server: ServerProcess, tmp_path: Path
) -> None:
    script = _copy(tmp_path, "unknown_directives.sh")
    done = server.cli("submit", script.name, cwd=script.parent)
    job = _show(server, done.stdout.strip())
    assert (job["num_gpus"], job["time_limit_s"], job["priority"]) == (2, 3600, -10)
    assert job["name"] == "unknown_directives.sh" and job["workdir"] == str(script.parent)
    warned = done.stderr.splitlines()
    assert warned[0] == ("gpuyard: warning: unknown_directives.sh:2: --partition=gpu ignored: "
                         "one queue per server here")  # fmt: skip
    assert len(warned) == 8  # and the default memory the script's job got (it asks no --mem)
    assert all(line.startswith("gpuyard: warning: unknown_directives.sh:") for line in warned[:7])
    assert warned[7].startswith("gpuyard: hint: no --mem given: the job is ")

    script = _copy(tmp_path, "array_sweep.sh")
    array_id = int(server.cli("submit", script.name, cwd=script.parent).stdout)
    tasks = server.client().array(array_id)
    assert [t["array_task_id"] for t in tasks] == list(range(32))
    job = tasks[0]
    assert (job["name"], job["num_gpus"], job["cpus"], job["mem_mib"]) == ("lr-sweep", 1, 4, 16384)
    assert job["output_path"] == "logs/sweep_%A_%a.out"
    assert job["error_path"] == "logs/sweep_%A_%a.err"
    assert (job["time_limit_s"], job["array_max_running"]) == (7200, 4)
    assert job["array_job_id"] == job["id"] and job["array_task_id"] == 0

    script = _copy(tmp_path, "gpuyard_extras.sh")
    # Its `#GPUYARD --venv /opt/venvs/ml` is not on this machine: refused at submit, in one
    # line; with a venv that is here (the flag wins over the directive) it is queued.
    refused = server.cli("submit", script.name, cwd=script.parent, check=False)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1
    assert refused.stderr.startswith("gpuyard: --venv /opt/venvs/ml: ")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    shutil.copy("/bin/true", venv / "bin" / "python")
    done = server.cli("submit", "--venv", str(venv), script.name, cwd=script.parent)
    job = _show(server, done.stdout.strip())
    assert (job["gpu_mem_mib"], job["retries"], job["time_limit_s"]) == (20480, 2, 7200)
    assert job["retry_on"] == ["failed", "timeout"] and job["venv"] == str(venv)
    assert job["notify_events"] == ["end"] and job["stop_signal"] == 10

    script = _copy(tmp_path, "lightning_single_node.sh")
    job = _show(server, server.cli("submit", "--mem-per-gpu", "1G", script.name,
                                   cwd=script.parent).stdout.strip())  # fmt: skip
    assert (job["num_gpus"], job["ntasks_per_node"], job["cpus"]) == (4, 4, 24)
    assert (job["mem_mib"], job["preemptible"], job["warn_signal"], job["warn_before_s"]) == (
        4096, True, 10, 120)  # fmt: skip


def test_flags_override_directives_and_the_dependency_is_kept(
    server: ServerProcess, tmp_path: Path
) -> None:
    first = server.cli("submit", "--", "sleep", "30").stdout.strip()
    script = tmp_path / "eval.sh"
    script.write_text(
        "#!/bin/bash\n#SBATCH --gres=gpu:2 -J from-script -t 10 --requeue\n"
        f"#SBATCH --dependency=afterok:{first}\n#SBATCH -o eval-%j.out\necho done\n"
    )
    job_id = server.cli("submit", "-G", "1", "-J", "from-flag", "--no-requeue", "-e", "err-%j",
                        str(script), cwd=tmp_path).stdout.strip()  # fmt: skip
    job = _show(server, job_id)
    assert (job["num_gpus"], job["name"], job["time_limit_s"]) == (1, "from-flag", 600)
    assert (job["preemptible"], job["dependency"]) == (False, f"afterok:{first}")
    assert (job["output_path"], job["error_path"]) == ("eval-%j.out", "err-%j")


def test_sbatch_answers_as_sbatch_and_the_job_knows_its_submit_dir(
    server: ServerProcess, tmp_path: Path
) -> None:
    script = tmp_path / "hello.sh"
    script.write_text('#!/bin/sh\n#SBATCH -J hello -t 5 -p debug\necho "from $SLURM_SUBMIT_DIR"\n')
    done = server.cli("sbatch", "--qos", "low", "hello.sh", cwd=tmp_path)
    said, job_id = done.stdout.rsplit(" ", 1)
    assert said == "Submitted batch job" and job_id.strip().isdigit()
    assert done.stderr.splitlines() == [
        "gpuyard: warning: --qos=low ignored: limits are per user and team here (gpuyard admin "
        "limit)",
        "gpuyard: warning: hello.sh:2: -p debug ignored: one queue per server here",
    ]
    job = wait_ended(server.client(), job_id.strip())
    assert job["state"] == "COMPLETED" and job["name"] == "hello"
    assert job["output_path"] == "slurm-%j.out"
    log = server.cli("logs", job_id.strip()).stdout
    assert f"from {tmp_path}" in log

    # sbatch's own options that submit has no flag for, and --signal in sbatch's meaning
    taken = server.cli("sbatch", "--parsable", "-n", "2", "--gpus-per-task=1", "--mem-per-cpu",
                       "1G", "--signal=B:USR1@60", "-t", "10", "-A", "lab", "--wrap", "sleep 60",
                       cwd=tmp_path)  # fmt: skip
    job = server.client().job(int(taken.stdout))
    assert (job["ntasks_per_node"], job["num_gpus"], job["cpus"], job["mem_mib"]) == (2, 2, 2, 2048)
    assert (job["warn_signal"], job["warn_before_s"], job["command"]) == (
        10, 60, ["/bin/sh", "-c", "sleep 60"])  # fmt: skip
    assert taken.stderr == ("gpuyard: warning: -A lab ignored: accounting is per user and team "
                            "here\n")  # fmt: skip
    server.cli("cancel", taken.stdout.strip())

    parsable = server.cli("sbatch", "--parsable", "-a", "0-2", "--wrap", "true", cwd=tmp_path)
    array = server.client().job(int(parsable.stdout))
    assert array["output_path"] == "slurm-%A_%a.out" and array["array_task_id"] == 0


def test_a_bad_directive_value_is_one_line_naming_its_line(
    server: ServerProcess, tmp_path: Path
) -> None:
    script = tmp_path / "bad.sh"
    script.write_text("#!/bin/sh\n#SBATCH -t 1:00:00\n#SBATCH --gres=gpu:a100:lots\ntrue\n")
    done = server.cli("submit", "bad.sh", cwd=tmp_path, check=False)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == ("gpuyard: bad.sh:3: --gres=gpu:a100:lots: give gpu:N or "
                           "gpu:TYPE:N (GPUs per node)\n")  # fmt: skip
    assert server.client().jobs() == []
