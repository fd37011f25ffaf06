"""The queue page live: a job submitted through the API while the page is open appears and runs
and leaves without a reload (the change feed); cancel from the page works, with the session's
session key; the keyboard reaches the controls with a visible focus and opens a job."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable

import pytest
from playwright.sync_api import Page, expect

from tests.e2e.server import wait_for
from tests.web.rig import Dashboard

pytestmark = pytest.mark.e2e


def _state(dashboard: Dashboard, job_id: int) -> str:
    with dashboard.client("admin") as client:
        return str(client.job(job_id)["state"])


def test_a_job_submitted_elsewhere_appears_runs_and_ends_without_a_reload(
    dashboard: Dashboard, as_user: Callable[[str], Page]
) -> None:
    page = as_user("alice")
    expect(page.get_by_role("heading", name="Queue")).to_be_visible()
    expect(page.locator(".live-dot")).to_have_text("live")
    page.evaluate("window.__sameDocument = true")  # gone if the page reloads
    gate = dashboard.place / f"go-{uuid.uuid4().hex}"
    job_id = dashboard.submit("alice", f"while [ ! -e {gate} ]; do sleep 0.1; done",
                              name="live-one")  # fmt: skip
    row = page.locator(f"#job-row-{job_id}")
    expect(row).to_be_visible()
    expect(row).to_contain_text("live-one")
    expect(row.locator(".state")).to_have_text("RUNNING")
    gate.touch()  # the job ends: COMPLETED, and the queue (pending and running) lets it go
    wait_for(lambda: _state(dashboard, job_id) == "COMPLETED")
    expect(row).to_have_count(0)
    assert page.evaluate("window.__sameDocument") is True


def test_cancel_from_the_queue_page_sends_the_session_key_and_cancels(
    dashboard: Dashboard, as_user: Callable[[str], Page]
) -> None:
    job_id = dashboard.submit("alice", "sleep 300", name="to-cancel")
    wait_for(lambda: _state(dashboard, job_id) == "RUNNING")
    page = as_user("alice")
    row = page.locator(f"#job-row-{job_id}")
    expect(row.locator(".state")).to_have_text("RUNNING")
    page.once("dialog", lambda dialog: dialog.accept())  # "Cancel running job N?"
    with page.expect_request(re.compile(rf"/api/v1/jobs/{job_id}/cancel$")) as sent:
        row.get_by_role("button", name=f"Cancel job {job_id}").click()
    key = page.evaluate("localStorage.getItem('gpuyard.sessionKey')")
    assert key and sent.value.method == "POST" and sent.value.headers.get("x-session-key") == key
    assert sent.value.response() is not None and sent.value.response().ok  # type: ignore[union-attr]
    expect(row).to_have_count(0)
    assert _state(dashboard, job_id) == "CANCELLED"


def test_hold_and_release_from_the_queue_page(
    dashboard: Dashboard, as_user: Callable[[str], Page]
) -> None:
    both = dashboard.submit("alice", "sleep 300", name="holds-the-gpus", gpus=2)
    wait_for(lambda: _state(dashboard, both) == "RUNNING")
    waiting = dashboard.submit("alice", "sleep 300", name="to-hold", gpus=1)
    try:
        page = as_user("alice")
        row = page.locator(f"#job-row-{waiting}")
        expect(row.locator(".state")).to_have_text("PENDING")
        row.get_by_role("button", name=f"Hold job {waiting}").click()
        expect(row.locator(".state")).to_have_text("HELD")
        with dashboard.client("alice") as client:
            assert client.job(waiting)["held"] is True
        row.get_by_role("button", name=f"Release job {waiting}").click()
        expect(row.locator(".state")).to_have_text("PENDING")
        with dashboard.client("alice") as client:
            assert client.job(waiting)["held"] is False
    finally:
        with dashboard.client("alice") as client:
            client.cancel(waiting)
            client.cancel(both)


def test_a_request_without_the_session_key_is_refused(
    dashboard: Dashboard, as_user: Callable[[str], Page]
) -> None:
    """The session cookie alone changes nothing: a request that does not send the page's key
    (as a forged form or another page's script could not) gets 401, and the job runs on."""
    job_id = dashboard.submit("alice", "sleep 300", name="kept")
    page = as_user("alice")
    status = page.evaluate(
        "async (id) => (await fetch(`/api/v1/jobs/${id}/cancel`, {method: 'POST'})).status",
        job_id,
    )
    assert status == 401
    assert _state(dashboard, job_id) in ("PENDING", "RUNNING")
    with dashboard.client("alice") as client:
        client.cancel(job_id)


def test_the_keyboard_reaches_the_controls_with_a_visible_focus_and_opens_a_job(
    dashboard: Dashboard, as_user: Callable[[str], Page]
) -> None:
    first = dashboard.submit("alice", "sleep 300", name="keyboard-a")
    second = dashboard.submit("alice", "sleep 300", name="keyboard-b")
    page = as_user("alice")
    expect(page.locator(f"#job-row-{second}")).to_be_visible()
    reached: list[dict[str, str]] = []
    for _ in range(40):  # Tab from the top of the page until the job list has the focus
        page.keyboard.press("Tab")
        focused = page.evaluate(
            """() => {
                const el = document.activeElement;
                const style = getComputedStyle(el);
                return {tag: el.tagName, text: (el.innerText || el.value || '').slice(0, 40),
                        label: el.getAttribute('aria-label') || '',
                        visible: el.matches(':focus-visible') ? 'yes' : 'no',
                        outline: style.outlineStyle + ' ' + style.outlineWidth,
                        shadow: style.boxShadow};
            }"""
        )
        reached.append(focused)
        assert focused["visible"] == "yes", focused
        assert focused["outline"].split()[0] != "none" or focused["shadow"] != "none", focused
        if "arrows" in focused["label"]:  # the job list (a grid: arrows move in it)
            break
    else:
        raise AssertionError(f"Tab never reached the job list: {reached}")
    texts = {f["text"].strip() for f in reached}
    assert {"Queue", "GPUs", "Submit"} <= texts  # the nav's links on the way
    # Down arrows select the jobs in turn (aria-selected), Enter opens the selected one.
    rows = page.locator(".grid-row")
    ids = [int(i.removeprefix("job-row-")) for i in rows.evaluate_all("rs => rs.map(r => r.id)")]
    target = ids.index(second)
    for _ in range(target + 1):
        page.keyboard.press("ArrowDown")
    expect(page.locator(f"#job-row-{second}")).to_have_attribute("aria-selected", "true")
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(rf"/ui/jobs/{second}$"))
    expect(page.get_by_role("heading", level=1)).to_contain_text(str(second))
    with dashboard.client("alice") as client:
        client.cancel(first)
        client.cancel(second)
