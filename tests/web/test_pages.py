"""Every dashboard page in a real Chromium with real data: alice and bob each train on a GPU
(jobs that print `::gpuyard progress` lines), each has a job waiting, each has a finished one;
the GPUs are the fake NVML's, their readings moving. The screenshots the README shows are
taken here (GPUYARD_SCREENSHOTS=docs/screenshots)."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.e2e.server import wait_for
from tests.web.rig import Dashboard, training_script, vary_telemetry

pytestmark = pytest.mark.e2e

TRAIN_STEPS = 2000  # longer than the module: the trainers run to its end (then are cancelled)


@dataclass
class Scene:
    dashboard: Dashboard
    alice_train: int
    bob_train: int
    alice_waits: int
    bob_waits: int
    alice_done: int
    bob_failed: int


def _job(dashboard: Dashboard, job_id: int) -> dict[str, Any]:
    with dashboard.client("admin") as client:
        return client.job(job_id)


def _progress_step(dashboard: Dashboard, job_id: int) -> int:
    with dashboard.client("admin") as client:
        progress = client.progress(job_id) or {}
    return int(progress.get("step") or 0)


@pytest.fixture(scope="module")
def scene(dashboard: Dashboard) -> Iterator[Scene]:
    stop = threading.Event()
    mover = threading.Thread(target=vary_telemetry, args=(dashboard, stop), daemon=True)
    mover.start()
    d = dashboard
    done = d.submit("alice", "echo checked", name="quick-check")
    failed = d.submit("bob", "echo 'bad config: lr=-1' >&2; exit 3", name="bad-config")
    alice = d.submit("alice", training_script(TRAIN_STEPS, 0.25), name="resnet50-imagenet",
                     gpus=1, time_limit="2h")  # fmt: skip
    bob = d.submit("bob", training_script(TRAIN_STEPS, 0.4), name="bert-finetune", gpus=1,
                   time_limit="90m")  # fmt: skip
    wait_for(lambda: {_job(d, alice)["state"], _job(d, bob)["state"]} == {"RUNNING"})
    alice_waits = d.submit("alice", "sleep 60", name="vit-large", gpus=1, time_limit="1h")
    bob_waits = d.submit("bob", "sleep 60", name="llama-eval", gpus=2, time_limit="3h")
    wait_for(lambda: _job(d, done)["state"] == "COMPLETED" and _job(d, failed)["state"] == "FAILED")
    yield Scene(d, alice, bob, alice_waits, bob_waits, done, failed)
    stop.set()
    mover.join()
    with d.client("admin") as client:
        for job_id in (alice, bob, alice_waits, bob_waits):
            client.cancel(job_id)


def test_the_queue_shows_both_users_jobs_with_reasons_and_estimates(
    scene: Scene, as_user: Callable[[str], Page], screenshots: Callable[[Page, str], Any]
) -> None:
    page = as_user("admin")
    expect(page.get_by_role("heading", name="Queue")).to_be_visible()
    for job_id, owner, name, state in (
        (scene.alice_train, "alice", "resnet50-imagenet", "RUNNING"),
        (scene.bob_train, "bob", "bert-finetune", "RUNNING"),
        (scene.alice_waits, "alice", "vit-large", "PENDING"),
        (scene.bob_waits, "bob", "llama-eval", "PENDING"),
    ):
        row = page.locator(f"#job-row-{job_id}")
        expect(row).to_contain_text(owner)
        expect(row).to_contain_text(name)
        expect(row.locator(".state")).to_have_text(state)
    # A running job's node:GPUs, a waiting one's reason and estimated start (the time limits
    # of the running jobs make one).
    expect(page.locator(f"#job-row-{scene.alice_train}")).to_contain_text(re.compile(r":\d"))
    waiting = page.locator(f"#job-row-{scene.alice_waits}")
    expect(waiting).to_contain_text("Resources")
    expect(waiting).to_contain_text(re.compile(r"in \d"))
    # The finished jobs are not in the queue.
    expect(page.locator(f"#job-row-{scene.alice_done}")).to_have_count(0)
    expect(page.locator(".count")).to_contain_text("2 running, 2 waiting")
    page.locator(f"#job-row-{scene.alice_train}").click()  # selected: its actions shown
    screenshots(page, "queue")


def test_the_job_page_shows_live_progress_metric_and_gpu_charts_and_the_log(
    scene: Scene, as_user: Callable[[str], Page], screenshots: Callable[[Page, str], Any]
) -> None:
    d, job_id = scene.dashboard, scene.alice_train
    wait_for(lambda: _progress_step(d, job_id) >= 60, timeout_s=60)  # charts with a history
    page = as_user("alice")
    page.goto(f"/ui/jobs/{job_id}")
    expect(page.get_by_role("heading", level=1)).to_have_text(f"Job {job_id}")
    expect(page.locator("div.job-head")).to_contain_text("resnet50-imagenet")
    bar = page.get_by_role("progressbar")
    expect(bar).to_have_attribute("aria-valuenow", re.compile(r"^\d"))
    first = float(bar.get_attribute("aria-valuenow") or 0)
    assert 0 < first < 100
    expect(page.get_by_text(re.compile(rf"step \d+ of {TRAIN_STEPS}"))).to_be_visible()
    expect(page.locator("main")).to_contain_text("loss")
    # Metric charts (uPlot: a canvas each) for loss and acc; GPU charts from the telemetry.
    metrics = page.get_by_role("region", name="Metrics")
    expect(metrics.locator(".chart h3", has_text="loss")).to_be_visible()
    expect(metrics.locator(".chart h3", has_text="acc")).to_be_visible()
    expect(metrics.locator("canvas").first).to_be_visible()
    gpu_use = page.get_by_role("region", name="GPU use")
    expect(gpu_use.locator(".chart h3", has_text="Utilisation")).to_be_visible()
    expect(gpu_use.locator(".chart h3", has_text="Memory used")).to_be_visible()
    expect(gpu_use.locator(".chart h3", has_text="Temperature")).to_be_visible()
    # Its GPUs' energy so far, from the fake's energy counter (issue 24).
    expect(gpu_use).to_contain_text(
        re.compile(r"Energy: \d+\.\d{4} kWh \(\d+ J, from the GPUs' energy counters\)")
    )
    # The log tail shows the job's own lines; the progress moves on without a reload.
    expect(page.get_by_label("Job output (last lines)")).to_contain_text("::gpuyard progress")
    page.evaluate("window.__sameDocument = true")
    wait_for(lambda: float(bar.get_attribute("aria-valuenow") or 0) > first, timeout_s=20)
    assert page.evaluate("window.__sameDocument") is True
    page.set_viewport_size({"width": 1440, "height": 1800})  # the charts and the log too
    screenshots(page, "job")


def test_a_finished_job_page_shows_its_end_and_why(
    scene: Scene, as_user: Callable[[str], Page]
) -> None:
    page = as_user("bob")
    page.goto(f"/ui/jobs/{scene.bob_failed}")
    expect(page.locator(".job-head .state")).to_have_text("FAILED")
    expect(page.get_by_label("Job output (last lines)")).to_contain_text("bad config: lr=-1")
    expect(page.get_by_role("region", name="Timeline")).to_contain_text(re.compile("exit|3"))


def test_the_gpus_board_shows_each_gpu_live_and_who_holds_it(
    scene: Scene, as_user: Callable[[str], Page], screenshots: Callable[[Page, str], Any]
) -> None:
    d = scene.dashboard
    page = as_user("alice")
    page.goto("/ui/gpus")
    expect(page.locator(".live-dot")).to_have_text("live")
    held = {_job(d, scene.alice_train)["gpus"][0]: ("alice", scene.alice_train),
            _job(d, scene.bob_train)["gpus"][0]: ("bob", scene.bob_train)}  # fmt: skip
    for index, (owner, job_id) in held.items():
        card = page.get_by_role("region", name=f"GPU {index}", exact=True)
        expect(card).to_contain_text("NVIDIA H100 80GB HBM3")
        expect(card).to_contain_text(f"job {job_id} ({owner})")
        for meter in ("Utilisation", "Memory", "Temperature", "Power"):
            expect(card.get_by_role("meter", name=meter)).to_have_attribute(
                "aria-valuenow", re.compile(r"^\d+$")
            )
    expect(page.locator("main")).to_contain_text("2 GPUs: 2 in use")
    # The readings move (the fake NVML's, once a second on the stream): no reload needed.
    util = page.get_by_role("region", name="GPU 0", exact=True).get_by_role(
        "meter", name="Utilisation"
    )
    seen = {util.get_attribute("aria-valuetext")}
    wait_for(lambda: seen.add(util.get_attribute("aria-valuetext")) or len(seen) > 1, timeout_s=20)  # type: ignore[func-returns-value]
    assert not page.get_by_role("button", name=re.compile("Drain")).count()  # admins only
    screenshots(page, "gpus")


def test_usage_shows_gpu_hours_per_user(
    scene: Scene, as_user: Callable[[str], Page], screenshots: Callable[[Page, str], Any]
) -> None:
    page = as_user("admin")
    page.goto("/ui/usage")
    table = page.get_by_role("table", name="GPU-hours per user")
    for owner in ("alice", "bob"):
        expect(table.get_by_role("row").filter(has_text=owner).first).to_be_visible()
    bob_row = table.get_by_role("row").filter(has_text="bob").first
    expect(bob_row).to_contain_text("failed 1")
    page.get_by_role("combobox", name="Per", exact=True).select_option("team")
    expect(page.get_by_role("table", name="GPU-hours per team")).to_contain_text("default")
    screenshots(page, "usage")


def test_an_admin_drains_a_gpu_on_the_board_and_alice_sees_the_event_live(
    scene: Scene, as_user: Callable[[str], Page], screenshots: Callable[[Page, str], Any]
) -> None:
    events = as_user("alice")
    events.goto("/ui/events")
    expect(events.locator(".live-dot")).to_have_text("live")
    board = as_user("admin")
    board.goto("/ui/gpus")
    card = board.get_by_role("region", name="GPU 1", exact=True)
    card.get_by_role("button", name="Drain GPU 1…").click()
    card.get_by_label("Why (shown to users)").fill("fan check")
    card.get_by_role("button", name="Drain GPU 1", exact=True).click()
    expect(card).to_contain_text("drained: fan check")
    with scene.dashboard.client("admin") as client:
        assert client.gpus()[1]["drained"] is True
    row = events.get_by_role("row").filter(has_text="fan check")
    expect(row).to_be_visible()
    expect(row).to_contain_text("Drain")
    card.get_by_role("button", name="Resume GPU 1").click()
    expect(card).not_to_contain_text("drained")
    expect(events.get_by_role("row").filter(has_text="Resume").first).to_be_visible()
    with scene.dashboard.client("admin") as client:
        assert client.gpus()[1]["drained"] is False
    screenshots(events, "events")


def test_will_it_start_answers_for_the_size_picked(
    scene: Scene, as_user: Callable[[str], Page], screenshots: Callable[[Page, str], Any]
) -> None:
    page = as_user("alice")
    page.goto("/ui/will-it-start")
    gpus = page.get_by_role("spinbutton", name=re.compile(r"^GPUs"))
    ask = page.get_by_role("button", name="Will it start?")
    gpus.fill("0")
    ask.click()
    answer = page.locator(".answer")
    expect(answer).to_contain_text("Yes: it would start now.")
    gpus.fill("1")  # both GPUs held by jobs with time limits: a start time
    ask.click()
    expect(answer).to_contain_text(re.compile(r"^Not now: .*start.* in \d"))
    screenshots(page, "will-it-start")
    gpus.fill("5")  # more than the server has: never, in one line
    ask.click()
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("It cannot run here")
    assert "\n" not in alert.inner_text().strip()
    with scene.dashboard.client("alice") as client:
        names = [j["name"] for j in client.jobs() if j["owner"] == "alice"]
    assert sorted(names) == ["resnet50-imagenet", "vit-large"]  # nothing was queued


def test_the_submit_form_queues_a_job_with_the_clis_rules(
    scene: Scene, as_user: Callable[[str], Page], screenshots: Callable[[Page, str], Any]
) -> None:
    page = as_user("alice")
    page.goto("/ui/submit")
    page.get_by_label("Command", exact=True).fill("sh -c 'echo hello from the form'")
    page.get_by_role("spinbutton", name=re.compile(r"^GPUs")).fill("0")
    page.get_by_label("Name", exact=True).fill("from-the-form")
    page.get_by_role("textbox", name=re.compile("^Working directory")).fill(
        str(scene.dashboard.place)
    )
    page.get_by_role("textbox", name=re.compile(r"^Time limit")).fill(
        "soon"
    )  # not a duration: the CLI's rule refuses it
    page.get_by_role("button", name="Submit", exact=True).click()
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("Not submitted")
    assert "\n" not in alert.inner_text().strip()
    page.get_by_role("textbox", name=re.compile(r"^Time limit")).fill("10m")
    with page.expect_request(re.compile(r"/api/v1/jobs$")) as sent:
        page.get_by_role("button", name="Submit", exact=True).click()
    assert sent.value.headers.get("x-session-key")
    status = page.get_by_role("status").filter(has_text="Submitted job")
    expect(status).to_be_visible()
    job_id = int(re.search(r"Submitted job (\d+)", status.inner_text()).group(1))  # type: ignore[union-attr]
    job = _job(scene.dashboard, job_id)
    assert (job["owner"], job["name"], job["command"]) == (
        "alice",
        "from-the-form",
        ["sh", "-c", "echo hello from the form"],
    )
    screenshots(page, "submit")
    page.get_by_role("link", name="Open job").click()
    expect(page.get_by_role("heading", level=1)).to_have_text(f"Job {job_id}")
    expect(page.get_by_label("Job output (last lines)")).to_contain_text("hello from the form")


def test_a_job_from_the_form_without_a_working_directory_runs_in_its_owners_home(
    scene: Scene, as_user: Callable[[str], Page]
) -> None:
    """The form says "empty: your home": the job's owner's, not the server's (on a root server
    alice may not even enter root's)."""
    page = as_user("alice")
    page.goto("/ui/submit")
    page.get_by_label("Command", exact=True).fill("sh -c 'echo at home: $PWD'")
    page.get_by_role("spinbutton", name=re.compile(r"^GPUs")).fill("0")
    page.get_by_role("button", name="Submit", exact=True).click()
    page.get_by_role("link", name="Open job").click()
    expect(page.locator("div.job-head .state")).to_have_text("COMPLETED")
    expect(page.get_by_label("Job output (last lines)")).to_contain_text("at home: ")
