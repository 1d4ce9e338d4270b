"""Which steps fire, which are superseded, and when a watch is exhausted."""

from __future__ import annotations

from datetime import date

import pytest

from followup_pipeline.domain.calendar import BusinessCalendar
from followup_pipeline.domain.steps import StepState, is_exhausted, select_due

DE = BusinessCalendar("DE")
PLAN = [
    StepState(1, 5, date(2026, 3, 9)),
    StepState(2, 12, date(2026, 3, 18)),
    StepState(3, 21, date(2026, 3, 31)),
]


@pytest.mark.parametrize(
    ("today", "fire", "supersede"),
    [
        (date(2026, 3, 6), None, []),
        (date(2026, 3, 9), 1, []),
        (date(2026, 3, 20), 2, [1]),
        (date(2026, 5, 1), 3, [1, 2]),
    ],
)
def test_steps_select_latest_due(today: date, fire: int | None, supersede: list[int]) -> None:
    selection = select_due(PLAN, today)
    assert (selection.fire, selection.supersede) == (fire, supersede)


def test_steps_select_ignores_fired_and_skipped() -> None:
    done = [
        StepState(1, 5, date(2026, 3, 9), fired_on=date(2026, 3, 9)),
        StepState(2, 12, date(2026, 3, 18), skipped=True),
        PLAN[2],
    ]
    assert select_due(done, date(2026, 3, 20)).fire is None


FIRED_ALL = [
    StepState(1, 5, date(2026, 3, 9), skipped=True),
    StepState(2, 12, date(2026, 3, 18), skipped=True),
    StepState(3, 21, date(2026, 3, 31), fired_on=date(2026, 3, 31)),
]


@pytest.mark.parametrize(
    ("today", "reset_on", "expected"),
    [
        (date(2026, 4, 7), None, False),  # 3 business days (Good Friday, Easter Monday)
        (date(2026, 4, 8), None, False),  # 4
        (date(2026, 4, 9), None, True),  # 5
        (date(2026, 4, 9), date(2026, 4, 7), False),  # a reset after the last step restarts it
        (date(2026, 4, 14), date(2026, 4, 7), True),
    ],
)
def test_steps_exhausted_after_five_business_days(
    today: date, reset_on: date | None, expected: bool
) -> None:
    result = is_exhausted(FIRED_ALL, today, exhaust_after=5, calendar=DE, last_reset_on=reset_on)
    assert result is expected


def test_steps_not_exhausted_while_a_step_is_open() -> None:
    assert not is_exhausted(PLAN, date(2026, 12, 1), exhaust_after=5, calendar=DE)
