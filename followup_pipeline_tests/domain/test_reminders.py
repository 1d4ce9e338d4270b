"""The reminder plan as records (pure): fixed local times of the tenant's zone as UTC instants
across both DST changes, the tenant's business days, and only the latest due of an assignment."""

from __future__ import annotations

from datetime import UTC, date, datetime, time

from followup_pipeline.domain.calendar import BusinessCalendar
from followup_pipeline.domain.reminders import (
    DueReminder,
    ReminderPlan,
    in_business_hours,
    latest_of_each,
    local_instant,
    plan_reminders,
    reminder_key,
)

BERLIN = BusinessCalendar("DE", "BE")
NEW_YORK = BusinessCalendar("US", "NY")


def _utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def test_reminders_nine_local_is_another_utc_hour_on_each_side_of_a_dst_change() -> None:
    # Berlin: CET (+1) before 29 March 2026, CEST (+2) after; back on 25 October.
    assert local_instant(date(2026, 3, 28), time(9), "Europe/Berlin") == _utc(2026, 3, 28, 8)
    assert local_instant(date(2026, 3, 30), time(9), "Europe/Berlin") == _utc(2026, 3, 30, 7)
    assert local_instant(date(2026, 10, 24), time(9), "Europe/Berlin") == _utc(2026, 10, 24, 7)
    assert local_instant(date(2026, 10, 26), time(9), "Europe/Berlin") == _utc(2026, 10, 26, 8)
    # New York: EST (-5) until 8 March 2026, EDT (-4) until 1 November.
    assert local_instant(date(2026, 3, 7), time(9), "America/New_York") == _utc(2026, 3, 7, 14)
    assert local_instant(date(2026, 3, 9), time(9), "America/New_York") == _utc(2026, 3, 9, 13)
    assert local_instant(date(2026, 10, 31), time(9), "America/New_York") == _utc(2026, 10, 31, 13)
    assert local_instant(date(2026, 11, 2), time(9), "America/New_York") == _utc(2026, 11, 2, 14)
    # A time the change skips moves forward by the gap; one it repeats is the first of the two.
    assert local_instant(date(2026, 3, 29), time(2, 30), "Europe/Berlin") == _utc(
        2026, 3, 29, 1, 30
    )
    assert local_instant(date(2026, 10, 25), time(2, 30), "Europe/Berlin") == _utc(
        2026, 10, 25, 0, 30
    )


def test_reminders_plan_two_days_before_the_due_day_and_three_business_days_after() -> None:
    # Due Tuesday 31 March 2026, 17:00 Berlin; Good Friday (3 April) and Easter Monday (6 April)
    # are holidays, so the third business day after is Tuesday 7 April.
    due = datetime(2026, 3, 31, 15, tzinfo=UTC)
    plan = plan_reminders(due, zone="Europe/Berlin", plan=ReminderPlan(), calendar=BERLIN)
    assert [(p.action_type, p.local_day, p.due_at) for p in plan] == [
        ("before_due", date(2026, 3, 29), _utc(2026, 3, 29, 7)),  # the day DST began
        ("due_day", date(2026, 3, 31), _utc(2026, 3, 31, 7)),
        ("overdue", date(2026, 4, 7), _utc(2026, 4, 7, 7)),
    ]
    # The due day is the local one: 02:00 UTC on 1 April is still 31 March in New York.
    late = plan_reminders(
        _utc(2026, 4, 1, 2), zone="America/New_York", plan=ReminderPlan(), calendar=NEW_YORK
    )
    assert late[1].local_day == date(2026, 3, 31)
    assert late[1].due_at == _utc(2026, 3, 31, 13)
    # A plan without the reminder before: two records.
    short = ReminderPlan(before_days=0, after_business_days=1, at=time(10))
    kinds = plan_reminders(due, zone="Europe/Berlin", plan=short, calendar=BERLIN)
    assert [p.action_type for p in kinds] == ["due_day", "overdue"]
    assert reminder_key("acme", 7, 42, "due_day", date(2026, 3, 31)) == (
        "lms:acme:7:42:due_day:2026-03-31"
    )


def test_reminders_after_an_outage_only_the_latest_due_of_an_assignment_goes_out() -> None:
    one, other = ("acme", 7, 42), ("acme", 8, 42)
    due = [
        DueReminder(1, one, "before_due", _utc(2026, 3, 29, 7)),
        DueReminder(2, one, "due_day", _utc(2026, 3, 31, 7)),
        DueReminder(3, other, "before_due", _utc(2026, 3, 29, 7)),
        DueReminder(4, one, "overdue", _utc(2026, 4, 7, 7)),
    ]
    send, overtaken = latest_of_each(reversed(due))
    assert sorted(r.id for r in send) == [3, 4]
    assert sorted(r.id for r in overtaken) == [1, 2]


def test_reminders_business_hours_are_the_tenants_own() -> None:
    # 08:30 UTC on Monday 30 March: 10:30 in Berlin, 04:30 in New York.
    now = _utc(2026, 3, 30, 8, 30)
    assert in_business_hours(now, zone="Europe/Berlin", calendar=BERLIN, hours=(8, 18))
    assert not in_business_hours(now, zone="America/New_York", calendar=NEW_YORK, hours=(8, 18))
    # Good Friday is no business day in Berlin.
    friday = _utc(2026, 4, 3, 9)
    assert not in_business_hours(friday, zone="Europe/Berlin", calendar=BERLIN, hours=(8, 18))
