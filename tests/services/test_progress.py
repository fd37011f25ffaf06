"""The progress service over real jobs and real files: a job printing the protocol and calling
the SDK is seen with its step, total, metrics and series, which outlive a server restart; a
huge log is read from its end only; rate and ETA follow the recent steps."""

from __future__ import annotations

import getpass
import sys
import textwrap
import time
from pathlib import Path

from gpuyard.adapters.store.memory import MemoryJobStore
from gpuyard.bootstrap import build_server
from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.states import JobState
from gpuyard.services.jobs.book import JobBook
from gpuyard.services.server import ServerFacade
from gpuyard.services.workflows.progress import ProgressService
from gpuyard.settings import Settings

TRAIN = textwrap.dedent(
    """
    import time, gpuyard
    for step in range(1, 6):
        print(f"::gpuyard progress step={step} total=10 loss={1 / step:.3f}", flush=True)
        time.sleep(0.2)
    time.sleep(1.5)  # the protocol lines are read before the SDK takes over
    for step in range(6, 11):
        gpuyard.progress(step, total=10, acc=step / 10)
    """
)


def _settings(tmp_path: Path) -> Settings:
    return Settings(state_dir=tmp_path / "state", gpus="2", cpus=4, kill_grace_s=1)


def _wait(server: ServerFacade, job_id: int, state: JobState) -> Job:
    deadline = time.monotonic() + 30
    while True:
        job = server.reads.get(job_id, server.auth.principal)
        if job.state is state:
            return job
        assert time.monotonic() < deadline, f"job {job_id} is {job.state}, not {state}"
        time.sleep(0.05)


def test_a_job_reports_through_the_protocol_and_the_sdk_and_it_outlives_a_restart(
    tmp_path: Path,
) -> None:
    server = build_server(_settings(tmp_path))
    try:
        server.start()
        spec = JobSpec(argv=(sys.executable, "-c", TRAIN), name="train", workdir=str(tmp_path))
        job = server.submits.submit(spec, server.auth.principal)
        assert server.progress is not None
        seen_protocol = False
        deadline = time.monotonic() + 30
        while server.reads.get(job.id, server.auth.principal).state is not JobState.COMPLETED:
            view = server.progress.progress(job)
            seen_protocol |= view.source == "protocol" and view.total == 10
            assert time.monotonic() < deadline, "the job did not end"
            time.sleep(0.1)
        assert seen_protocol, "the protocol lines were never seen while the job ran"
        deadline = time.monotonic() + 10
        while server.progress.progress(job).step != 10:  # its last words, read after its end
            assert time.monotonic() < deadline, server.progress.progress(job)
            time.sleep(0.1)
        view = server.progress.progress(job)
        assert (view.step, view.total, view.fraction, view.source) == (10, 10, 1.0, "sdk")
        assert view.metrics["loss"] == 0.2 and 0.6 <= view.metrics["acc"] <= 1.0
        series = server.progress.series(job, None, 500)
        steps = [v for _, v in series["step"]]
        assert steps == sorted(steps) and steps[-1] == 10.0 and len(steps) >= 2
        assert series["loss"][-1][1] <= 0.5 and set(series) == {"step", "loss", "acc"}
    finally:
        server.close()  # its last points are written
    again = build_server(_settings(tmp_path))
    try:
        assert again.progress is not None
        stored = again.progress.series(job, ["step", "loss"], 500)
        assert stored == {"step": series["step"], "loss": series["loss"]}
        assert again.progress.progress(job).step == 10
    finally:
        again.close()


def _running(job_id: int, workdir: Path) -> Job:
    spec = JobSpec(argv=("true",), name="t", workdir=str(workdir))
    job = Job(id=job_id, spec=spec, owner=getpass.getuser(), state=JobState.PENDING,
              submitted_at=1.0)  # fmt: skip
    return job.transition(JobState.RUNNING, gpus=(), started_at=1.0)


def test_a_huge_log_is_read_from_its_end_never_whole(tmp_path: Path) -> None:
    log = tmp_path / "1" / "output.log"
    log.parent.mkdir()
    with log.open("w") as f:
        f.write("::gpuyard progress step=1 total=9\n")  # 8 MB before the end: never read
        f.write(("x" * 99 + "\n") * 80_000)
        f.write("::gpuyard progress step=7 total=9\n")
    store = MemoryJobStore()
    service = ProgressService(JobBook([_running(1, tmp_path)]), store, lambda i: str(log))
    service.tick()
    job = _running(1, tmp_path)
    assert service.series(job, ["step"], 100) == {
        "step": [(service.progress(job).updated_at or 0, 7.0)]
    }
    with log.open("a") as f:
        f.write("  80%|########  | 8/9 [00:08<00:01,  1.00it/s, loss=0.25]\n")
    service.tick()
    view = service.progress(job)
    assert (view.step, view.metrics, view.source) == (8, {"loss": 0.25}, "tqdm")
    service.flush()
    assert [p.step for p in store.load_progress(1)] == [8]  # one bucket: the latest step


def test_rate_and_eta_come_from_the_recent_steps(tmp_path: Path) -> None:
    log = tmp_path / "1" / "output.log"
    log.parent.mkdir()
    log.write_text("")
    now = [1000.0]
    service = ProgressService(
        JobBook([_running(1, tmp_path)]), MemoryJobStore(), lambda i: str(log),
        clock=lambda: now[0],
    )  # fmt: skip
    job = _running(1, tmp_path)
    for step in (10, 20, 30):
        with log.open("a") as f:
            f.write(f"::gpuyard progress step={step} total=130\n")
        service.tick()
        now[0] += 10.0
    view = service.progress(job)  # 20 steps in 20 s; 100 left; read 10 s after the last
    assert view.rate_per_s == 1.0 and view.eta_s == 90.0
    with log.open("a") as f:
        f.write("::gpuyard progress step=2 total=130\n")  # a new run starts over
    service.tick()
    assert service.progress(job).rate_per_s is None
