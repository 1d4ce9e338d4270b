"""The morning list, snapshot-tested on a fixed data set in both languages, HTML and text.

Run with ``FOLLOWUP_UPDATE_SNAPSHOTS=1`` to write the snapshots anew after a wanted change; review
the diff before committing it.
"""

from __future__ import annotations

import os
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from followup_pipeline.domain.reports import (
    ClosedLine,
    Health,
    Language,
    MorningData,
    StageLine,
    StepLine,
    SummaryLine,
    WeeklyData,
    render_morning,
    render_weekly,
)

SNAPSHOTS = Path(__file__).parent / "snapshots"
UPDATE = os.environ.get("FOLLOWUP_UPDATE_SNAPSHOTS") == "1"  # read once, at import

MORNING = MorningData(
    day=date(2026, 3, 2),
    time_zone="Europe/Berlin",
    due_today=[
        StepLine("Bäckerei Hoffmann – Pilot", "Bäckerei Hoffmann GmbH", "Ada Lovelace", 1, 3,
                 date(2026, 3, 2), "https://crm.example/#Opportunity/view/d1"),
        StepLine("<script>alert(1)</script>", None, "Ada Lovelace", 2, 3, date(2026, 3, 2),
                 "https://crm.example/#Opportunity/view/d2"),
        StepLine("Krüger & Söhne – Rollout", "Krüger & Söhne KG", None, 1, 3, date(2026, 3, 2),
                 None),
    ],
    overdue=[
        StepLine("Schulz AG", "Schulz AG", "Grace Hopper", 2, 3, date(2026, 2, 26),
                 "https://crm.example/#Opportunity/view/d3", reason="paused"),
        StepLine("Weber & Co", None, "Grace Hopper", 1, 3, date(2026, 2, 27),
                 "https://crm.example/#Opportunity/view/d4", reason="crm_error",
                 detail="espocrm: HTTP 503"),
    ],
    summaries=[
        SummaryLine("Bäckerei Hoffmann – Pilot", "Ada Lovelace",
                    "Kundin prüft das Angebot über 15.000 EUR.", "Bis Freitag nachfassen.",
                    "https://crm.example/#Opportunity/view/d1"),
    ],
    closed=[
        ClosedLine("Meyer GmbH", "Grace Hopper", "won", datetime(2026, 2, 27, 15, 5, tzinfo=UTC)),
    ],
    review_open=2,
    health=Health(dead_letters=1, last_evaluate_ok=datetime(2026, 3, 2, 5, 0, tzinfo=UTC),
                  oldest_pending_s=180.0),
)  # fmt: skip


@pytest.mark.parametrize("language", ["de", "en"])
@pytest.mark.parametrize("part", ["html", "text"])
def test_reports_morning_list_matches_its_snapshot(language: Language, part: str) -> None:
    rendered = render_morning(MORNING, language)
    content = rendered.html if part == "html" else rendered.text
    path = SNAPSHOTS / f"morning_{language}.{'html' if part == 'html' else 'txt'}"
    if UPDATE:
        path.write_text(content, encoding="utf-8")
    assert content == path.read_text(encoding="utf-8")


def test_reports_html_escapes_what_the_crm_says() -> None:
    html = render_morning(MORNING, "en").html
    assert "<script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "Krüger &amp; Söhne KG" in html


def test_reports_subject_says_late_and_dates_are_local() -> None:
    late = render_morning(MorningData(**{**MORNING.__dict__, "late": True}), "de")
    assert late.subject == "verspätet: Follow-ups am 02.03.2026"
    assert render_morning(MORNING, "en").subject == "Follow-ups for 2026-03-02"
    # 15:05 UTC is 16:05 in Berlin (winter time); 05:00 UTC is 06:00.
    text = render_morning(MORNING, "en").text
    assert "won, 2026-02-27 16:05" in text
    assert "last successful evaluate: 2026-03-02 06:00" in text


WEEK = WeeklyData(
    start=date(2026, 2, 28),
    end=date(2026, 3, 6),
    time_zone="Europe/Berlin",
    fired=9,
    suppressed={"superseded": 2, "deal_closed": 1},
    opened=5,
    closed={"won": 2, "lost": 1, "exhausted": 1},
    open_by_stage=[
        StageLine("Negotiation", 3, 12.3, 20),
        StageLine("<b>Proposal</b>", 7, 6.0, 15),
    ],
    failed_runs=1,
    dead_letters=0,
    tasks_per_day={
        date(2026, 3, 2): 4, date(2026, 3, 3): 2, date(2026, 3, 4): 0,
        date(2026, 3, 5): 1, date(2026, 3, 6): 2,
    },
)  # fmt: skip


@pytest.mark.parametrize("language", ["de", "en"])
@pytest.mark.parametrize("part", ["html", "text"])
def test_reports_weekly_overview_matches_its_snapshot(language: Language, part: str) -> None:
    rendered = render_weekly(WEEK, language)
    content = rendered.html if part == "html" else rendered.text
    path = SNAPSHOTS / f"weekly_{language}.{'html' if part == 'html' else 'txt'}"
    if UPDATE:
        path.write_text(content, encoding="utf-8")
    assert content == path.read_text(encoding="utf-8")


def test_reports_weekly_chart_is_drawn_with_table_cells_and_escapes_names() -> None:
    rendered = render_weekly(WEEK, "en")
    assert rendered.subject == "Weekly overview 2026-02-28 – 2026-03-06"
    # The busiest day gets 20 cells, the others their share; no image service.
    assert rendered.html.count('bgcolor="#4a7bd0"') == 20 + 10 + 0 + 5 + 10
    assert "<img" not in rendered.html
    assert "&lt;b&gt;Proposal&lt;/b&gt;" in rendered.html
    assert "2026-03-02 #################### 4" in rendered.text
