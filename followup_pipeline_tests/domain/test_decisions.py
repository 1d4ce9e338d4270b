"""A deal's stage decides its watch."""

from __future__ import annotations

import pytest

from followup_pipeline.domain.decisions import Close, Decision, Open, StagePolicy, decide_for_stage

POLICY = StagePolicy(watched={"Proposal", "Negotiation"}, won="Closed Won", lost="Closed Lost")


@pytest.mark.parametrize(
    ("stage", "expected"),
    [
        ("Proposal", Open()),
        ("Negotiation", Open()),
        ("Closed Won", Close("won")),
        ("Closed Lost", Close("lost")),
        ("Qualification", Close("out_of_scope")),
        (None, Close("subject_gone")),
    ],
)
def test_decisions_stage_to_watch(stage: str | None, expected: Decision) -> None:
    assert decide_for_stage(stage, POLICY) == expected
