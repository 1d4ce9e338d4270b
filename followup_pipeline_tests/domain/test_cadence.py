"""Cadence planning counts business days strictly after the base date."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from followup_pipeline.domain.cadence import (
    DEFAULT_CADENCE,
    plan_steps,
    replan_steps,
    validate_offsets,
)
from followup_pipeline.domain.calendar import BusinessCalendar
from followup_pipeline.domain.localtime import local_date

DE = BusinessCalendar("DE")


def test_cadence_default_plan_from_a_monday() -> None:
    steps = plan_steps(date(2026, 3, 2), DEFAULT_CADENCE, DE)
    assert [(s.step_no, s.offset_days, s.due_on) for s in steps] == [
        (1, 5, date(2026, 3, 9)),
        (2, 12, date(2026, 3, 18)),
        (3, 21, date(2026, 3, 31)),
    ]


def test_cadence_registration_at_2330_local_on_friday() -> None:
    # 23:30 in Berlin on Friday 6 March is 22:30 UTC: the base is the local Friday.
    registered = datetime(2026, 3, 6, 22, 30, tzinfo=UTC)
    base = local_date(registered, "Europe/Berlin")
    assert base == date(2026, 3, 6)
    assert plan_steps(base, DEFAULT_CADENCE, DE)[0].due_on == date(2026, 3, 13)


def test_cadence_registration_after_local_midnight_counts_from_saturday() -> None:
    # 23:30 UTC on Friday is already Saturday 00:30 in Berlin.
    base = local_date(datetime(2026, 3, 6, 23, 30, tzinfo=UTC), "Europe/Berlin")
    assert base == date(2026, 3, 7)
    assert plan_steps(base, [1], DE)[0].due_on == date(2026, 3, 9)


def test_cadence_replan_keeps_offsets_from_the_reset_day() -> None:
    steps = plan_steps(date(2026, 3, 2), DEFAULT_CADENCE, DE)
    again = replan_steps(date(2026, 3, 10), steps[1:], DE)
    assert [(s.step_no, s.due_on) for s in again] == [
        (2, date(2026, 3, 26)),
        (3, date(2026, 4, 10)),
    ]


@pytest.mark.parametrize("offsets", [[], [0, 5], [5, 5], [12, 5], [-1]])
def test_cadence_rejects_invalid_offsets(offsets: list[int]) -> None:
    with pytest.raises(ValueError, match="strictly increasing"):
        validate_offsets(offsets)
