"""The check of a model's summary."""

from __future__ import annotations

import json

import pytest

from followup_pipeline.domain.summaries import (
    SummaryContext,
    SummaryRejected,
    check_summary,
    numbers_in,
    summary_from,
)

SOURCE = "Angebot über 15.000 EUR vom 12.03.2026; Rabatt 20 %; 25 Lizenzen."
CONTEXT = SummaryContext(deal_name="Bäckerei Hoffmann – Pilot", source_text=SOURCE)


def answer(line1: str, line2: str = "Bis Freitag nachfassen.") -> str:
    return json.dumps({"line1": line1, "line2": line2})


def test_summaries_numbers_are_compared_by_their_digits() -> None:
    assert numbers_in("15.000 EUR, 15,000 or 15000; 12.03.2026") == {"15000", "12032026"}


@pytest.mark.parametrize(
    "line1",
    [
        "Kundin prüft das Angebot über 15.000 EUR.",
        "Kundin prüft das Angebot über 15,000 EUR.",
        "25 Lizenzen, 20 % Rabatt gewünscht.",
        "Angebot vom 12.03.2026 liegt vor.",
    ],
)
def test_summaries_usable_answers_pass(line1: str) -> None:
    checked = check_summary(answer(line1), CONTEXT)
    assert checked.line1 == line1


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("Sure, here you go: the customer wants a discount.", "Invalid JSON"),
        ('{"line1": "a"}', "line2: Field required"),
        (json.dumps({"line1": "a", "line2": "b", "line3": "c"}), "line3: Extra inputs"),
        (answer("   "), "line1: the line is empty"),
        (answer("Erste Zeile\nzweite Zeile"), "more than one line"),
        (answer("x" * 161), "161 characters, more than 160"),
        (answer("Angebot über 18.000 EUR."), "number(s) 18000 do not occur"),
        (answer("Rabatt 30 % gewünscht."), "number(s) 30 do not occur"),
        (answer("Bäckerei Hoffmann – Pilot"), "only repeats the deal's name"),
        (answer("bäckerei hoffmann pilot!"), "only repeats the deal's name"),
        (json.dumps({"line1": 1, "line2": "b"}), "line1: Input should be a valid string"),
    ],
)
def test_summaries_unusable_answers_say_why(raw: str, reason: str) -> None:
    with pytest.raises(SummaryRejected) as rejected:
        check_summary(raw, CONTEXT)
    assert reason in rejected.value.reason


def test_summaries_operator_lines_are_checked_for_shape_only() -> None:
    operator = CONTEXT.model_copy(update={"typed_by_operator": True})
    lines = {"line1": "Angebot über 18.000 EUR korrigiert.", "line2": "Freitag anrufen."}
    assert summary_from(lines, operator).line1 == lines["line1"]
    with pytest.raises(SummaryRejected, match="empty"):
        summary_from({"line1": "", "line2": "x"}, operator)
