"""Logging in to the dashboard, and what one user's browser shows of another's jobs: a wrong
token is one line on the login page; alice's queue lists bob's job as the API lists it to her
(who, what size, which state: no command) and his job's page is "not found" to her."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.web.rig import VIEWPORT, Dashboard, login

pytestmark = pytest.mark.e2e


def test_a_wrong_token_is_refused_in_one_line_and_the_right_one_logs_in(
    browser: Browser, dashboard: Dashboard
) -> None:
    context = browser.new_context(viewport=VIEWPORT, base_url=dashboard.url)  # type: ignore[arg-type]
    try:
        page = context.new_page()
        page.goto("/ui/")  # not logged in: sent to the login page, to come back after
        expect(page).to_have_url(re.compile(r"/ui/login"))
        field = page.get_by_label("API token")
        field.fill("gpy_not-a-real-token")
        field.press("Enter")
        alert = page.get_by_role("alert")
        expect(alert).to_be_visible()
        message = alert.inner_text().strip()
        assert "\n" not in message and "token" in message
        assert "Traceback" not in page.content()
        assert not context.cookies()
        page.get_by_label("API token").fill(dashboard.users["alice"].token)
        page.get_by_label("API token").press("Enter")
        expect(page.get_by_role("heading", name="Queue")).to_be_visible()
        expect(page.locator("#who")).to_contain_text("alice")
        (cookie,) = context.cookies()  # the session's id, and nothing a script reads
        assert cookie["name"] == f"gpuyard_session_{dashboard.server.port}"
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert "#" not in page.url  # the key the login sent along left the address at once
    finally:
        context.close()


def test_alice_sees_bobs_job_in_the_queue_as_the_api_shows_it_but_not_its_details(
    dashboard: Dashboard, as_user: Callable[[str], Page]
) -> None:
    secret = "bob-secret-7f3a"
    bobs = dashboard.submit("bob", f"sleep 300 # {secret}", name="bob-train")
    with dashboard.client("alice") as client:
        listed = next(j for j in client.jobs() if j["id"] == bobs)
    assert listed["owner"] == "bob" and listed["command"] == []  # what the API gives her

    alice = as_user("alice")
    row = alice.locator(f"#job-row-{bobs}")
    expect(row).to_be_visible()
    expect(row).to_contain_text("bob")
    expect(row).to_contain_text("bob-train")
    expect(row.get_by_role("button")).to_have_count(0)  # no cancel or hold of his job
    expect(row.get_by_role("link")).to_have_count(0)  # nor a link to a page not hers to see
    row.dblclick()
    expect(alice).not_to_have_url(re.compile(r"/ui/jobs/"))
    assert secret not in alice.content()

    alice.goto(f"/ui/jobs/{bobs}")
    expect(alice.get_by_text("not found", exact=False).first).to_be_visible()
    assert secret not in alice.content()

    bob = as_user("bob")
    bob.goto(f"/ui/jobs/{bobs}")
    expect(bob.get_by_text(secret, exact=False).first).to_be_visible()


def test_a_logged_out_browser_is_sent_to_the_login_page(
    browser: Browser, dashboard: Dashboard
) -> None:
    page = login(browser, dashboard.url, dashboard.users["alice"].token)
    try:
        page.get_by_role("button", name="Log out").click()
        expect(page).to_have_url(re.compile(r"/ui/login"))
        page.goto("/ui/gpus")
        expect(page.get_by_label("API token")).to_be_visible()
    finally:
        page.context.close()
