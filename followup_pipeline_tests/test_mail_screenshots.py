"""The mails as a reader sees them (the reports, a learner's reminder, an academy owner's mail):
the HTML of the snapshot tests' data rendered in Debian's Chromium through Playwright, headless
(`make browser` installs it; without it these tests are skipped and say so).

With FOLLOWUP_UPDATE_SCREENSHOTS=1 the screenshots go to docs/ (the README links them);
otherwise to a temporary folder.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from followup_pipeline.domain.academy_mail import render_reminder
from followup_pipeline.domain.reports import personal, render_morning, render_weekly
from followup_pipeline_tests.domain.test_academy_mail import owner_mail, reminder
from followup_pipeline_tests.domain.test_reports import GRACE, MORNING, WEEK
from followup_pipeline_tests.test_browser import CHROMIUM, CHROMIUM_ARGS

DOCS = Path(__file__).resolve().parent.parent / "docs"
#: A mail client's reading pane.
VIEWPORT = {"width": 980, "height": 700}


@pytest.fixture(scope="module")
def page() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.skip("no Chromium: run `make browser` (Debian's chromium, installed as root)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("no Playwright: `make browser` (or the dev extras) installs it")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = chromium.new_context(viewport=VIEWPORT)
            # A mail's HTML is shown offline: nothing may be fetched.
            context.route("**/*", lambda route: route.abort())
            yield context.new_page()
        finally:
            chromium.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.environ.get("FOLLOWUP_UPDATE_SCREENSHOTS") == "1":
        return DOCS
    return tmp_path_factory.mktemp("mails")


#: The seeded week without the snapshot tests' hostile names (a `<script>` deal, a `<b>` stage):
#: the pictures show what a team's mail looks like.
CLEAN_MORNING = replace(
    MORNING,
    steps=[
        replace(s, deal_name="Hansa Kälte – Wartungsvertrag") if s.deal_id == "d2" else s
        for s in MORNING.steps
    ],
)
CLEAN_WEEK = replace(
    WEEK,
    open_by_stage=[
        replace(s, stage=s.stage.replace("<b>", "").replace("</b>", "")) for s in WEEK.open_by_stage
    ],
    deals=replace(WEEK.deals, lost=[replace(d, deal_name="Hansa Kälte") for d in WEEK.deals.lost]),
)
MAILS: dict[str, Any] = {
    "mail-morning-team-de": render_morning(CLEAN_MORNING, "de"),
    "mail-morning-personal-en": render_morning(personal(CLEAN_MORNING, *GRACE), "en"),
    "mail-weekly-de": render_weekly(CLEAN_WEEK, "de"),
    "mail-learner-reminder-de": render_reminder(reminder("de")),
    "mail-academy-owner-en": owner_mail("en"),
}


@pytest.mark.parametrize("name", sorted(MAILS))
def test_mail_renders_in_a_browser_as_a_readable_page(name: str, page: Any, shots: Path) -> None:
    mail = MAILS[name]
    page.set_content(mail.html, wait_until="load")
    # Every table has a header row, and each header cell is drawn (not an empty grid).
    if page.locator("table").count():
        headers = page.locator("th")
        assert headers.count() > 0
        assert all(text.strip() for text in headers.all_inner_texts())
    else:  # a letter (a learner's reminder, an owner's mail): its text and links are drawn
        assert page.locator("a").count() > 0
        assert len(page.inner_text("body")) > 200
    # The page is as wide as a reading pane: no table pushes it sideways.
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= VIEWPORT["width"], width
    target = shots / f"{name}.png"
    page.screenshot(path=str(target), full_page=True)
    assert target.stat().st_size > 10_000  # a drawn page, not a blank one
