"""Every command of the README's ```sh blocks, run as written: from the clone's root, with the
virtualenv `make run` made on PATH (as `source .venv/bin/activate` puts it), against a real
server on a free port and a temporary state dir, with four GPUs of the project's fake NVML.

Each command has a plan below, keyed by its text: run (exit 0), refused (what the README says
it refuses here, in one line), interrupted (`top`: Ctrl-C), typed into (an interactive
session, through a pty), or run elsewhere (`make test` is this suite; `make run`'s script and
the quick start's new terminal have tests of their own, named; a Ray cluster's lines run in
tests/raycluster). A command of the README without a plan fails the test: none is skipped
unseen. What `$JOB` is before a command (a pending, a running or the block's own job) is the
plan's too, so each line meets the state it is written for.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import select
import signal
import subprocess
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.server import BIN, ServerProcess, wait_for
from tests.fakenvml import build_fake_nvml, fake_nvml_env, gcc_path
from tests.needs import missing

REPO = Path(__file__).resolve().parents[2]
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
H100 = [("NVIDIA H100 80GB HBM3", 81559, f"GPU-0000000{i}-dddd-eeee-ffff-000000000000")
        for i in range(4)]  # fmt: skip
ACTIVE = ("PENDING", "RUNNING")
PROMPT = "# " if os.geteuid() == 0 else "$ "  # an interactive bash's, its PS1 unset


@dataclass(frozen=True)
class Plan:
    """What a README command is expected to do here. kind: run (exit 0) | pty (on a terminal:
    once `expect` shows, `then` is typed, or Ctrl-C's SIGINT sent for "^C"; exit 0) |
    elsewhere (not here: `why` says where). job: what $JOB is first (block: the block's own
    $JOB, running, pending; None: as the command before left it)."""

    kind: str = "run"
    job: str | None = None
    expect: str = ""
    then: str = ""
    why: str = ""
    # After it: "completes" (the job it printed the id of runs to COMPLETED), "serves" (the
    # service it printed answers its health check).
    check: str = ""


ELSEWHERE_DEMO = "scripts/demo.sh, which `make run` runs: tests/e2e/test_demo.py"
ELSEWHERE_QUICK = "the quick start's new terminal: tests/e2e/test_quickstart.py runs it"
ELSEWHERE_RAY = "a Ray cluster's: tests/raycluster starts one"

PLANS: dict[str, Plan] = {
    # Quick start
    "make run": Plan("elsewhere", why=ELSEWHERE_DEMO),
    "make test": Plan("elsewhere", why="the whole suite, this test among it"),
    "JOB=$(.venv/bin/gpuyard submit --time 10m -- .venv/bin/python examples/train_mlp.py)":
        Plan("elsewhere", why=ELSEWHERE_QUICK),
    ".venv/bin/gpuyard queue": Plan("elsewhere", why=ELSEWHERE_QUICK),
    ".venv/bin/gpuyard logs -f $JOB": Plan("elsewhere", why=ELSEWHERE_QUICK),
    # Using it
    "gpuyard server [--host 127.0.0.1] [--port 8765] [--state-dir DIR] [--gpus auto|N|0,2] "
    "[--cpus N] [--policy default]":
        Plan("elsewhere", why="a synopsis: this test's server is it, with --port, --state-dir "
             "and --cpus given and --gpus auto finding the fake GPUs"),
    "JOB=$(gpuyard submit --gpus 2 --cpus 8 --mem 8G --time 1-00:00:00 --name mlp -- python "
    "examples/train_mlp.py --lr 0.01)": Plan(),
    "gpuyard submit examples/train_mlp.py": Plan(check="completes"),
    "gpuyard submit --dry-run --gpus 4 -- python examples/train_mlp.py": Plan(),
    "gpuyard submit --preemptible --signal USR1 --gpus 1 -- python examples/train_mlp.py":
        Plan(check="completes"),
    "gpuyard queue": Plan(job="block"),
    "gpuyard queue --all": Plan(job="block"),
    "gpuyard show $JOB": Plan(job="block"),
    "gpuyard logs -f $JOB": Plan(job="block"),
    "gpuyard wait $JOB": Plan(job="block"),
    "gpuyard cancel $JOB": Plan(job="running"),
    "gpuyard submit --gpus 4 --distributed torchrun -- python examples/train_ddp.py": Plan(),
    "gpuyard submit --gpu-mem 20G -- python examples/train_mlp.py": Plan(check="completes"),
    "gpuyard server --backend ray": Plan("elsewhere", why=ELSEWHERE_RAY),
    "gpuyard submit --nodes 2 --gpus-per-node 8 --distributed torchrun -- python "
    "examples/train_ddp.py": Plan("elsewhere", why=ELSEWHERE_RAY),
    "gpuyard gpus": Plan(job="running"),
    "gpuyard top": Plan("pty", job="running", expect="JOBID", then="^C"),
    'gpuyard queue --me --sort -p --format "%.6i %j %T %M %R"': Plan(job="pending"),
    "gpuyard hold $JOB; gpuyard release $JOB": Plan(job="pending"),
    "gpuyard update $JOB --time 2h --gpus 2": Plan(job="pending"),
    "gpuyard requeue $JOB": Plan(job="running"),
    'gpuyard admin drain 3 --reason "fan"': Plan(),
    "gpuyard admin resume 3": Plan(),
    "gpuyard doctor": Plan(),
    "gpuyard submit --check --gpus 1 -- python examples/train_mlp.py": Plan(),
    "gpuyard simulate --trace tests/data/traces/philly_14237.csv --gpus 1024 --compare "
    "fifo,backfill,las,default": Plan(),
    # Workflows
    "gpuyard sbatch examples/train.sbatch": Plan(check="completes"),
    "gpuyard squeue -u $USER; gpuyard sacct -j $JOB -X; gpuyard scancel $JOB":
        Plan(job="running"),
    "gpuyard submit --array 0-99%8 -- sh -c 'python examples/train_mlp.py --seed "
    "$SLURM_ARRAY_TASK_ID'": Plan(),
    "gpuyard submit -d afterok:$JOB -- python examples/train_mlp.py": Plan(job="running"),
    "SWEEP=$(gpuyard sweep --parsable examples/sweep.toml)": Plan(),
    "gpuyard sweep show $SWEEP": Plan(),
    "gpuyard run --gpus 1 -- bash": Plan("pty", expect=PROMPT, then="exit\n"),
    "gpuyard run --gpus 1 --jupyter": Plan(),
    "gpuyard serve --gpus 1 --port auto --health /health -- python examples/serve_model.py":
        Plan(check="serves"),
    "gpuyard submit --venv .venv -- python examples/train_mlp.py": Plan(check="completes"),
    "gpuyard notify set https://hooks.example.org/gpu": Plan(),
}  # fmt: skip


def readme_commands(text: str) -> list[str]:
    """Each command of the README's sh blocks, in order, without its trailing comment: a line
    continued with `\\` joined, blank and comment-only lines left out."""
    found = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            command = re.split(r"\s{2,}#\s", line.strip(), maxsplit=1)[0].strip()
            if command and not command.startswith("#"):
                found.append(command)
    return found


def test_every_readme_command_has_a_plan() -> None:
    """A command added to (or changed in) the README is run here, or said where it runs."""
    commands = readme_commands((REPO / "README.md").read_text())
    assert sorted(set(commands)) == sorted(commands), "a command twice: give each a plan"
    unplanned = [c for c in commands if c not in PLANS]
    assert not unplanned, f"README commands without a plan in {__file__}: {unplanned}"
    stale = [c for c in PLANS if c not in commands]
    assert not stale, f"plans for commands the README no longer has: {stale}"
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^run: .*\n\t.*\./scripts/demo\.sh", makefile, re.MULTILINE)
    quickstart = (REPO / "tests" / "e2e" / "test_quickstart.py").read_text()
    assert 'readme_block("In a new terminal")' in quickstart


class Session:
    """The README's commands typed in one terminal's environment, one at a time."""

    def __init__(self, server: ServerProcess, home: Path) -> None:
        self.server = server
        self.env = {
            "PATH": f"{BIN}:{SYSTEM_PATH}", "VIRTUAL_ENV": str(BIN.parent), "HOME": str(home),
            "USER": getpass.getuser(), "LANG": "C.UTF-8", "GPUYARD_URL": server.url,
            "GPUYARD_STATE_DIR": str(server.state_dir), "GPUYARD_SOCKET": "off",
        }  # fmt: skip
        self.vars: dict[str, str] = {}

    def script(self, command: str) -> str:
        given = "".join(f"{k}={v}\n" for k, v in self.vars.items())
        return (f"set -eo pipefail\n{given}{command}\n"
                'echo "::vars JOB=${JOB-} SWEEP=${SWEEP-}"\n')  # fmt: skip

    def run(self, command: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(["bash", "-c", self.script(command)], cwd=REPO, env=self.env,
                              capture_output=True, text=True, timeout=900)  # fmt: skip
        if done.returncode == 0:
            said = re.search(r"^::vars JOB=(\S*) SWEEP=(\S*)$", done.stdout, re.MULTILINE)
            assert said, done.stdout
            for name, value in zip(("JOB", "SWEEP"), said.groups(), strict=True):
                if value:
                    self.vars[name] = value
        return done

    def typed(self, command: str, expect: str, then: str) -> tuple[int, str]:
        """Run `command` on a pty; once `expect` shows, type `then`; its exit and screen."""
        master, slave = os.openpty()
        proc = subprocess.Popen(["bash", "-c", self.script(command)], cwd=REPO, env=self.env,
                                stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
        os.close(slave)
        seen, typed = b"", False
        try:
            while proc.poll() is None or select.select([master], [], [], 0)[0]:
                if select.select([master], [], [], 0.2)[0]:
                    try:
                        seen += os.read(master, 65536)
                    except OSError:  # EIO: the command's side closed
                        break
                if not typed and expect.encode() in seen:
                    if then == "^C":  # what the terminal's Ctrl-C does: SIGINT to the group
                        os.killpg(proc.pid, signal.SIGINT)
                    else:
                        os.write(master, then.encode())
                    typed = True
            return proc.wait(timeout=60), seen.decode(errors="replace")
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            os.close(master)


def _job(server: ServerProcess, argv: list[str], state: str) -> str:
    """A job in `state` (RUNNING, or PENDING behind a job holding every GPU)."""
    if state == "PENDING":
        _job(server, ["--gpus", "4", "--", "sleep", "600"], "RUNNING")
    job_id = server.cli("submit", *argv).stdout.strip()
    wait_for(lambda: server.client().job(int(job_id))["state"] == state, timeout_s=120)
    return job_id


def _cancel_all_but(server: ServerProcess, keep: set[int]) -> None:
    client = server.client()
    live = [j for j in client.jobs(all=True) if j["state"] in ACTIVE and j["id"] not in keep]
    for job in live:
        server.cli("cancel", str(job["id"]), check=False)
    for job in live:
        wait_for(lambda j=job: client.job(j["id"])["state"] not in ACTIVE, timeout_s=120)


def _check(server: ServerProcess, check: str, said: str) -> None:
    """What a command's plan asks of what it started, besides its exit status."""
    if check == "completes":
        job_id = int(re.findall(r"\d+", said)[-1])
        (job,) = server.client().wait([job_id], raise_on_failure=False)
        log = server.client().log(job_id).decode(errors="replace")
        # sbatch's output file, where Slurm puts it (the clone's root here): read, then gone.
        slurm_out = REPO / f"slurm-{job_id}.out"
        if slurm_out.exists():
            log += slurm_out.read_text(errors="replace")
            slurm_out.unlink()
        assert job["state"] == "COMPLETED", f"{job['state']} {job['reason']}: {log[-2000:]}"
        assert "done: final loss" in log, log[-2000:]
    elif check == "serves":
        job_id, url = said.split()[:2]

        def healthy() -> bool:
            try:
                with urllib.request.urlopen(f"{url}/predict?x=1.5", timeout=5) as answer:
                    return json.loads(answer.read()) == {"x": 1.5, "y": 3.5}
            except OSError:
                return False

        wait_for(healthy, timeout_s=300, interval_s=0.5)
        assert server.client().job(int(job_id))["state"] == "RUNNING"


@pytest.mark.timeout(2400)  # some fifty commands, a few trainings and a simulation among them
def test_every_readme_command_runs_as_written(tmp_path: Path) -> None:
    if BIN != REPO / ".venv" / "bin" or not (BIN / "gpuyard").exists():
        missing(
            "the README's commands name ./.venv, which is not this test run's env",
            "the README's commands", "run the tests with .venv/bin/python (make test)",
        )  # fmt: skip
    if gcc_path() is None:
        missing("gcc is needed to build the fake NVML", "the README's commands", "make cc")
    nvml = build_fake_nvml(tmp_path / "nvml")
    env = fake_nvml_env(nvml, gpus=H100, GPUYARD_SOCKET="off")
    env["PATH"] = f"{BIN}:{SYSTEM_PATH}"
    server = ServerProcess(tmp_path / "state", "--cpus", "32", "--kill-grace", "1", env=env)
    server.start(timeout_s=120)
    session = Session(server, tmp_path / "home")
    (tmp_path / "home").mkdir()
    outcomes: list[str] = []
    block_job: str | None = None  # the block's own $JOB, kept until `gpuyard wait $JOB`
    try:
        for command in readme_commands((REPO / "README.md").read_text()):
            plan = PLANS[command]
            if plan.kind == "elsewhere":
                outcomes.append(f"elsewhere: {command}  ({plan.why})")
                continue
            _cancel_all_but(server, {int(block_job)} if block_job else set())
            if plan.job == "running":
                session.vars["JOB"] = _job(server, ["--", "sleep", "600"], "RUNNING")
            elif plan.job == "pending":
                session.vars["JOB"] = _job(server, ["--gpus", "4", "--", "true"], "PENDING")
            elif plan.job == "block":
                assert block_job is not None, "the block's own $JOB comes first"
                session.vars["JOB"] = block_job
            if plan.kind == "pty":
                code, screen = session.typed(command, plan.expect, plan.then)
                assert code == 0, f"{command}: exit {code}\n{screen[-3000:]}"
                outcomes.append(f"typed into: {command}")
                continue
            done = session.run(command)
            said = f"{command}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr}"
            assert "Traceback" not in done.stderr, said
            assert done.returncode == 0, said
            _check(server, plan.check, done.stdout.split("::vars")[0])
            if command.startswith("JOB=$("):
                block_job = session.vars["JOB"]
            elif command == "gpuyard wait $JOB":
                block_job = None  # it has ended
            outcomes.append(f"ran: {command}")
    finally:
        server.stop()
        server.kill_jobs()
        print("\n".join(outcomes))
