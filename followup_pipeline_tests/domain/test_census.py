"""When a watched stage has gone quiet, as pure logic: emptied after having deals, nothing
entering while the others keep filling, and the quiet weeks that are no alarm."""

from __future__ import annotations

from datetime import date, timedelta

from followup_pipeline.domain.census import Count, quiet_stages

STAGES = ["Proposal", "Negotiation"]
MONDAY = date(2026, 3, 2)
WEEK = [MONDAY + timedelta(days=n) for n in range(5)]


def _rows(table: dict[str, list[tuple[int, int]]]) -> list[Count]:
    """(listed, entered) per stage for each day of the week."""
    return [
        Count(day, stage, listed, entered)
        for stage, days in table.items()
        for day, (listed, entered) in zip(WEEK, days, strict=True)
    ]


def test_census_a_stage_emptied_after_having_deals_is_quiet_since_the_first_empty_day() -> None:
    rows = _rows(
        {"Proposal": [(4, 1)] * 5, "Negotiation": [(3, 1), (3, 0), (0, 0), (0, 0), (0, 0)]}
    )
    [quiet] = quiet_stages(rows, STAGES, listed_days=WEEK[2:], entered_days=[])
    assert (quiet.stage, quiet.rule, quiet.since) == ("Negotiation", "emptied", WEEK[2])
    assert "on 2026-03-03 it listed 3" in quiet.message
    # A stage that never had deals is not emptied; a day without a reading decides nothing.
    never = _rows({"Proposal": [(4, 1)] * 5, "Negotiation": [(0, 0)] * 5})
    assert quiet_stages(never, STAGES, listed_days=WEEK[2:], entered_days=[]) == []
    gap = [r for r in rows if not (r.stage == "Negotiation" and r.day == WEEK[3])]
    assert quiet_stages(gap, STAGES, listed_days=WEEK[2:], entered_days=[]) == []


def test_census_nothing_entering_while_the_others_fill_is_quiet_and_a_quiet_week_is_not() -> None:
    rows = _rows({"Proposal": [(5, 2), (6, 1), (7, 1), (8, 2), (9, 0)],
                  "Negotiation": [(2, 1), (2, 0), (2, 0), (2, 0), (2, 0)]})  # fmt: skip
    [quiet] = quiet_stages(rows, STAGES, listed_days=WEEK[2:], entered_days=WEEK[1:4])
    assert (quiet.stage, quiet.rule, quiet.since) == ("Negotiation", "nothing enters", WEEK[1])
    assert "while 4 entered the other watched stages" in quiet.message
    calm = _rows({"Proposal": [(5, 1), (5, 0), (5, 0), (5, 0), (5, 1)],
                  "Negotiation": [(2, 1), (2, 0), (2, 0), (2, 0), (2, 0)]})  # fmt: skip
    assert quiet_stages(calm, STAGES, listed_days=WEEK[2:], entered_days=WEEK[1:4]) == []
