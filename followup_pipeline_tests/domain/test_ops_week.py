"""The weekly operations look, snapshot-tested on one seeded week in both languages, HTML and
text: failures grouped by cause (step and kind of error) with an example each, what waits for
whom since when, suppressions by reason, degraded runs by vendor, the census, the account; and
an academy's own look. Run with ``FOLLOWUP_UPDATE_SNAPSHOTS=1`` to write the snapshots anew."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from followup_pipeline.domain.census import StageView
from followup_pipeline.domain.ops_week import (
    Cause,
    Degraded,
    OpsWeek,
    Owed,
    error_kind,
    render_ops_week,
)
from followup_pipeline.domain.report_words import Language

from .snapshot import match_snapshot

HTTP_503 = "espocrm: HTTP 503 on GET /api/v1/Opportunity: Service unavailable."

WEEK = OpsWeek(
    start=date(2026, 2, 23),
    end=date(2026, 3, 1),
    zone="Europe/Berlin",
    failures=[
        Cause("lead_intake", "0:crm_upsert", error_kind(HTTP_503), 4, "event:41", HTTP_503),
        Cause("deal_followup", None, error_kind("clickup: HTTP 400 on POST task: bad field"), 1,
              "action:task:7:2", "clickup: HTTP 400 on POST task: bad field"),
        Cause("deal_followup", None, error_kind(None), 2, "step 1 of deal 6650a1", ""),
        Cause("learning", None, error_kind("KeyError: no Moodle token 'X'"), 1,
              "reminder of Lena Fischer", "KeyError: no Moodle token 'X'"),
    ],
    waiting=[
        Owed("ops@example.com", 5, {"dead_event": 4, "step": 1},
             datetime(2026, 2, 24, 9, 5, tzinfo=UTC)),
        Owed("owner@academy.example", 1, {"reminder": 1}, datetime(2026, 2, 27, 7, 0, tzinfo=UTC)),
    ],
    suppressed={"superseded": 3, "dry_run": 2, "decided": 1},
    degraded=[Degraded("evaluate", "espocrm", 3, "CRM unreachable: " + HTTP_503)],
    census=[StageView("Proposal", 14, (3, 5, 4, 6)), StageView("Negotiation", 0, (0, 0, 2, 1))],
    due=212,
    unaccounted=1,
    unaccounted_named=["deal_followup step task:9:1"],
)  # fmt: skip


@pytest.mark.parametrize("language", ["de", "en"])
def test_ops_week_matches_its_snapshot_and_names_causes(language: Language) -> None:
    rendered = render_ops_week(WEEK, language)
    match_snapshot(f"ops_week_{language}.html", rendered.html)
    match_snapshot(f"ops_week_{language}.txt", f"Subject: {rendered.subject}\n\n{rendered.text}")
    # Causes, not only counts: the step and the kind of error, and one example with its error.
    assert "4× lead_intake (0:crm_upsert): espocrm HTTP 503" in rendered.text
    assert "event:41: espocrm: HTTP 503 on GET /api/v1/Opportunity" in rendered.text
    assert "clickup HTTP 400" in rendered.text


def test_ops_week_an_academys_look_keeps_to_its_own() -> None:
    own = OpsWeek(
        start=WEEK.start, end=WEEK.end, zone="America/New_York", tenant="academy-newyork",
        failures=[WEEK.failures[3]], waiting=[WEEK.waiting[1]], suppressed={"completed": 4},
        due=None,
    )  # fmt: skip
    rendered = render_ops_week(own, "en")
    match_snapshot("ops_week_tenant_en.txt", f"Subject: {rendered.subject}\n\n{rendered.text}")
    assert "census" not in rendered.text
    assert "evaluate" not in rendered.text


def test_ops_week_error_kinds() -> None:
    assert error_kind(HTTP_503) == "espocrm HTTP 503"
    assert error_kind("ValueError: bad") == "ValueError"
    assert (
        error_kind("moodle: invalidtoken: Invalid token") == "moodle: invalidtoken: Invalid token"
    )
    assert error_kind("  ") == ""
