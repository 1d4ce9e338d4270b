"""The account of due actions, pure: how each kind's rows end, and when each is late."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from typing import Any

from followup_pipeline.domain.account import AccountRows, build

#: Saturday 7 March 2026, 15:00 in Berlin.
SATURDAY = datetime(2026, 3, 7, 14, 0, tzinfo=UTC)
TENANT = {"mode": "live", "time_zone": "Europe/Berlin", "hours_start": 8, "hours_end": 18,
          "holiday_country": "DE", "holiday_subdivision": None}  # fmt: skip


def _rows(**found: list[dict[str, Any]]) -> AccountRows:
    empty: dict[str, list[dict[str, Any]]] = {
        name: [] for name in ("steps", "actions", "events", "reminders", "certificates",
                              "publications")
    }  # fmt: skip
    return AccountRows(**{**empty, **found})


def _account(rows: AccountRows, now: datetime) -> dict[str, str]:
    result = build(rows, opens=time(7), since=now - timedelta(days=7), until=now)
    endings = {}
    for line in result.lines.values():
        for ending, n in line.endings.items():
            endings[f"{line.pipeline} {line.kind}"] = f"{ending} {n}"
    return endings


def test_account_a_reminder_due_on_a_saturday_is_not_late_before_mondays_hours() -> None:
    due = SATURDAY.replace(hour=8)  # 09:00 Saturday, outside the academy's business days
    reminder = {**TENANT, "tenant_id": "a", "name": "lms:a:1", "due_at": due, "late_from": due,
                "outcome": "planned", "reason": None, "owner": None}  # fmt: skip
    rows = _rows(reminders=[reminder])
    assert _account(rows, SATURDAY) == {"learning reminder": "not_late 1"}
    monday_10 = SATURDAY + timedelta(days=2, hours=-5)  # Monday 10:00 in Berlin: hours ran 2 h
    assert _account(rows, monday_10) == {"learning reminder": "not_late 1"}
    assert _account(rows, monday_10 + timedelta(minutes=5)) == {
        "learning reminder": "unaccounted 1"
    }
    # An academy switched off sends nothing: what it left is suppressed, not lost.
    off = _rows(reminders=[{**reminder, "mode": "off"}])
    assert _account(off, monday_10 + timedelta(hours=1)) == {"learning reminder": "suppressed 1"}


def test_account_content_added_after_its_moment_is_late_from_when_it_was_added() -> None:
    added = SATURDAY
    content = {"tenant_id": "a", "name": "lms-publish:a:w1:v1",
               "due_at": added - timedelta(hours=5), "late_from": added,
               "outcome": "waiting", "reason": None, "owner": None, "mode": "live"}  # fmt: skip
    rows = _rows(publications=[content])
    assert _account(rows, added + timedelta(minutes=59)) == {"learning publication": "not_late 1"}
    assert _account(rows, added + timedelta(hours=2)) == {"learning publication": "unaccounted 1"}
    waiting = _rows(publications=[{**content, "owner": "owner@academy.example"}])
    assert _account(waiting, added + timedelta(hours=2)) == {"learning publication": "waiting 1"}


def test_account_a_lead_write_whose_event_a_person_closed_is_suppressed_as_decided() -> None:
    due = SATURDAY - timedelta(hours=3)
    write = {"kind": "crm_lead", "name": "lead:7:0:crm_upsert", "due_at": due, "late_from": due,
             "outcome": "failed", "reason": None, "owner": None, "closed_how": None}  # fmt: skip
    assert _account(_rows(actions=[write]), SATURDAY) == {"lead_intake crm_lead": "unaccounted 1"}
    decided = _rows(actions=[{**write, "closed_how": "decided"}])
    assert _account(decided, SATURDAY) == {"lead_intake crm_lead": "suppressed 1"}
