"""Cadence planning: which local date each follow-up step falls due on.

A plan counts business days strictly after its base date (the local date of registration or of
the last reset). A plan is fixed when made: changing a cadence later affects new plans only.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date

from followup_pipeline.domain.calendar import BusinessCalendar

DEFAULT_CADENCE: tuple[int, ...] = (5, 12, 21)


@dataclass(frozen=True)
class PlannedStep:
    """Step ``step_no`` (1-based) of a plan, due on local date ``due_on``."""

    step_no: int
    offset_days: int
    due_on: date


def validate_offsets(offsets: Sequence[int]) -> tuple[int, ...]:
    """Offsets must be positive and strictly increasing."""
    values = tuple(offsets)
    if not values or values[0] < 1 or any(b <= a for a, b in itertools.pairwise(values)):
        raise ValueError(f"a cadence is a strictly increasing list of days ≥ 1, not {list(values)}")
    return values


def plan_steps(
    base_on: date, offsets: Sequence[int], calendar: BusinessCalendar
) -> list[PlannedStep]:
    """Every step of a new plan based on ``base_on``."""
    return [
        PlannedStep(
            step_no=number, offset_days=offset, due_on=calendar.add_business_days(base_on, offset)
        )
        for number, offset in enumerate(validate_offsets(offsets), start=1)
    ]


def replan_steps(
    reset_on: date, steps: Sequence[PlannedStep], calendar: BusinessCalendar
) -> list[PlannedStep]:
    """The given (unfired) steps planned again from ``reset_on``, each at reset + its offset."""
    return [
        PlannedStep(
            step.step_no, step.offset_days, calendar.add_business_days(reset_on, step.offset_days)
        )
        for step in steps
    ]
