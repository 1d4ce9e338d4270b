"""lead.v2, twice in agreement (JSON Schema and pydantic model), the check of a model's answer,
and the text about a lead that is sent (masked)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import jsonschema
import pytest

from followup_pipeline.domain.classification import (
    SCHEMA_NAME,
    ClassificationRejected,
    LeadClassification,
    for_the_person,
    lead_v2_schema,
    parse_classification,
)
from followup_pipeline.domain.crm_lead import ClassificationFacts
from followup_pipeline.domain.lead_text import EarlierEvent, classification_text
from followup_pipeline.domain.leads import LeadIn

#: The keywords that make up the structure both sides must state alike (descriptions and titles
#: are words for people and the model, not structure).
STRUCTURE = (
    "type",
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
)

MESSAGE = (
    "Guten Tag,\n\nwir möchten ein Angebot für 25 Lizenzen ab dem 01.04.2026.\n"
    "Bitte rufen Sie mich an: +49 89 1234567 oder schreiben Sie an "
    "julia.hoffmann@baeckerei.example.\nZahlung per IBAN DE89 3704 0044 0532 0130 00.\n\n"
    "Viele Grüße\nJULIA HOFFMANN"
)
LEAD = LeadIn(
    email="julia.hoffmann@baeckerei.example",
    name="Julia Hoffmann",
    company="Bäckerei Hoffmann GmbH",
    phone="+49 89 1234567",
    message=MESSAGE,
    consent=True,
    page="https://shop.example/preise",
    source="site-form",
    kind="form",
)
COMPANY = {"name": "Bäckerei Hoffmann GmbH", "industry": "Food", "size": 120, "country": "DE"}
FACTS = classification_text(LEAD, COMPANY)

VALID: dict[str, Any] = {
    "segment": "mid_market",
    "intent": "buy",
    "priority": 2,
    "summary": "Bäckerei Hoffmann möchte ein Angebot für 25 Lizenzen ab dem 01.04.2026.",
    "language": "de",
    "reasons": ["Fragt nach einem Angebot.", "Firma mit 120 Mitarbeitenden."],
}


def with_(**changes: Any) -> dict[str, Any]:
    answer = {**VALID, **changes}
    return {key: value for key, value in answer.items() if value is not None}


def without(field: str) -> dict[str, Any]:
    return {key: value for key, value in VALID.items() if key != field}


# --- lead.v2: the JSON Schema and the pydantic model agree -----------------------------------


def structure(schema: dict[str, Any]) -> dict[str, Any]:
    """What a schema says about the shape of an answer, and nothing else."""
    shape: dict[str, Any] = {key: schema[key] for key in STRUCTURE if key in schema}
    if "items" in schema:
        shape["items"] = structure(schema["items"])
    if "properties" in schema:
        shape["properties"] = {name: structure(spec) for name, spec in schema["properties"].items()}
        shape["required"] = sorted(schema.get("required", []))
        shape["additionalProperties"] = schema.get("additionalProperties", True)
    return shape


def test_classification_schema_file_is_draft_2020_12_and_closed() -> None:
    schema = lead_v2_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"] == SCHEMA_NAME
    assert schema["additionalProperties"] is False
    jsonschema.Draft202012Validator.check_schema(schema)


def test_classification_schema_file_and_model_state_the_same_structure() -> None:
    from_file = structure(lead_v2_schema())
    from_model = structure(LeadClassification.model_json_schema())
    assert from_file == from_model
    # The comparison is not empty: every field, every bound is in it.
    assert set(from_file["properties"]) == {
        "segment",
        "intent",
        "priority",
        "summary",
        "language",
        "reasons",
    }
    assert from_file["required"] == sorted(from_file["properties"])
    assert from_file["properties"]["priority"] == {"type": "integer", "minimum": 1, "maximum": 4}


SAMPLES: list[tuple[str, Any]] = [
    ("valid", VALID),
    ("valid, priority 1", with_(priority=1)),
    ("valid, priority as 2.0", with_(priority=2.0)),
    ("valid, summary of 200", with_(summary="x" * 200)),
    ("valid, five reasons", with_(reasons=["a", "b", "c", "d", "e"])),
    ("priority 5", with_(priority=5)),
    ("priority 0", with_(priority=0)),
    ("priority as text", with_(priority="2")),
    ("priority as a boolean", with_(priority=True)),
    ("priority 2.5", with_(priority=2.5)),
    ("summary of 201", with_(summary="x" * 201)),
    ("summary empty", with_(summary="")),
    ("an extra field", with_(confidence=0.9)),
    ("segment missing", without("segment")),
    ("reasons missing", without("reasons")),
    ("language deu", with_(language="deu")),
    ("language DE", with_(language="DE")),
    ("language with a newline", with_(language="de\n")),
    ("segment not in the enum", with_(segment="huge")),
    ("intent not in the enum", with_(intent="Buy")),
    ("no reasons", with_(reasons=[])),
    ("six reasons", with_(reasons=["a", "b", "c", "d", "e", "f"])),
    ("a reason of 201", with_(reasons=["x" * 201])),
    ("a reason that is a number", with_(reasons=[1])),
    ("an array, not an object", [VALID]),
]


@pytest.mark.parametrize(("case", "sample"), SAMPLES, ids=[case for case, _ in SAMPLES])
def test_classification_schema_and_model_judge_each_sample_alike(case: str, sample: Any) -> None:
    by_schema = jsonschema.Draft202012Validator(lead_v2_schema()).is_valid(sample)
    try:
        LeadClassification.model_validate(sample)
        by_model = True
    except ValueError:
        by_model = False
    assert by_schema == by_model, case
    assert by_schema == case.startswith("valid"), case


# --- parse_classification: the check of a model's answer --------------------------------------


def test_classification_a_valid_answer_parses() -> None:
    checked = parse_classification(json.dumps(VALID), facts=FACTS)
    assert checked.intent == "buy"
    assert checked.priority == 2
    assert checked.reasons == ["Fragt nach einem Angebot.", "Firma mit 120 Mitarbeitenden."]


@pytest.mark.parametrize(
    "raw", ["Sure! The lead wants to buy.", "", '{"segment": "enterprise"', "[1, 2"]
)
def test_classification_an_answer_that_is_not_json_is_rejected(raw: str) -> None:
    with pytest.raises(ClassificationRejected) as caught:
        parse_classification(raw, facts=FACTS)
    assert caught.value.reason.startswith("not JSON")
    assert caught.value.raw == raw


@pytest.mark.parametrize(
    ("answer", "field"),
    [
        (with_(priority=5), "priority:"),
        (with_(summary="x" * 201), "summary:"),
        (with_(confidence=0.9), "confidence: Extra inputs are not permitted"),
        (without("intent"), "intent: Field required"),
        (with_(language="deu"), "language:"),
        (with_(segment="huge"), "segment:"),
        (with_(reasons=["ok", "x" * 201]), "reasons.1:"),
        ([VALID], "answer:"),
    ],
)
def test_classification_each_break_of_lead_v2_names_its_field(answer: Any, field: str) -> None:
    raw = json.dumps(answer)
    with pytest.raises(ClassificationRejected) as caught:
        parse_classification(raw, facts=FACTS)
    assert caught.value.reason.startswith(f"breaks {SCHEMA_NAME}: ")
    assert field in caught.value.reason
    assert caught.value.raw == raw


@pytest.mark.parametrize(
    ("answer", "where", "fact"),
    [
        (with_(summary="Möchte ein Angebot über 18.500 EUR."), "summary", "number 18500"),
        (with_(summary="Start am 15.05.2026 gewünscht."), "summary", "number 15052026"),
        (with_(reasons=["Budget 40.000 EUR."]), "reasons.0", "number 40000"),
        (with_(reasons=["ok", "Start 2027-01-01."]), "reasons.1", "number 2027"),
        (
            with_(summary="Antwort an j.hoffmann@baeckerei.example senden."),
            "summary",
            "e-mail address j.hoffmann@baeckerei.example",
        ),
        (
            with_(reasons=["Schreibt an julia.hoffmann@baeckerei.example."]),
            "reasons.0",
            "e-mail address julia.hoffmann@baeckerei.example",
        ),
        (
            with_(reasons=["Kam über https://shop.example/angebot."]),
            "reasons.0",
            "URL https://shop.example/angebot",
        ),
    ],
)
def test_classification_an_invented_fact_in_the_free_text_is_rejected(
    answer: dict[str, Any], where: str, fact: str
) -> None:
    with pytest.raises(ClassificationRejected) as caught:
        parse_classification(json.dumps(answer), facts=FACTS)
    assert caught.value.reason.startswith(f"{where}: ")
    assert fact in caught.value.reason


@pytest.mark.parametrize(
    "answer",
    [
        with_(summary="Angebot für 25 Lizenzen ab 01.04.2026 gewünscht."),
        with_(reasons=["Kam über https://shop.example/preise."]),
        with_(reasons=["Firma in DE, 120 Mitarbeitende, Food."]),
        with_(summary="Möchte zurückgerufen werden: [phone]."),
    ],
)
def test_classification_a_fact_present_in_the_input_is_accepted(answer: dict[str, Any]) -> None:
    assert parse_classification(json.dumps(answer), facts=FACTS).summary == answer["summary"]


def test_classification_a_blank_summary_or_reason_is_rejected() -> None:
    with pytest.raises(ClassificationRejected, match=r"^reasons\.0: blank$"):
        parse_classification(json.dumps(with_(reasons=["  "])), facts=FACTS)


def test_classification_an_operators_answer_is_held_to_the_schema_not_the_facts() -> None:
    typed = json.dumps(with_(summary="Budget 40.000 EUR."))
    assert parse_classification(typed, facts=FACTS, check_facts=False).summary == (
        "Budget 40.000 EUR."
    )
    with pytest.raises(ClassificationRejected, match="priority"):
        parse_classification(json.dumps(with_(priority=5)), facts=FACTS, check_facts=False)


# --- classification_text: what is sent about a lead -------------------------------------------


def test_classification_text_sends_no_personal_data_of_the_lead() -> None:
    for personal in (
        "julia.hoffmann@baeckerei.example",
        "+49 89 1234567",
        "1234567",
        "DE89 3704 0044 0532 0130 00",
        "DE89",
        "Julia Hoffmann",
    ):
        assert personal.casefold() not in FACTS.casefold(), personal
    assert "[e-mail]" in FACTS
    assert "[phone]" in FACTS
    assert "[IBAN]" in FACTS
    assert "[name]" in FACTS


def test_classification_text_holds_the_company_page_message_and_facts() -> None:
    assert "Bäckerei Hoffmann GmbH" in FACTS
    assert "https://shop.example/preise" in FACTS
    assert (
        "Message:\nGuten Tag,\n\nwir möchten ein Angebot für 25 Lizenzen ab dem 01.04.2026.\n"
        in FACTS
    )
    for fact in (
        "- name: Bäckerei Hoffmann GmbH",
        "- industry: Food",
        "- size: 120",
        "- country: DE",
    ):
        assert fact in FACTS
    assert "consent" not in FACTS.casefold()


def test_classification_text_masks_company_facts_and_ignores_other_keys() -> None:
    company = {"name": "Ops <ops@acme.example>", "ceo": "Jane Roe", "size": None}
    text = classification_text(LEAD, company)
    assert "ops@acme.example" not in text
    assert "Jane Roe" not in text
    assert "size" not in text


def test_classification_text_without_message_or_facts_says_so() -> None:
    lead = LeadIn(email="a@b.example", source="payment", kind="payment")
    text = classification_text(lead)
    assert "a@b.example" not in text
    assert "(no message)" in text
    assert "- none" in text
    assert text == classification_text(lead)  # pure: the same lead, the same text


def test_classification_text_takes_the_leads_name_out_only_as_a_whole_word() -> None:
    lead = LeadIn(
        email="max@b.example",
        name="Max",
        message="Maximal 3 Nutzer. Gruß, max",
        source="site-form",
        kind="form",
    )
    assert classification_text(lead).endswith("Message:\nMaximal 3 Nutzer. Gruß, [name]")


# --- the person's classification: what is sent of their earlier events, what stands -----------

PAYMENT = LeadIn(
    email="julia.hoffmann@baeckerei.example",
    name="Julia Hoffmann",
    amount=Decimal("4900"),
    currency="jpy",
    amount_unit="major",
    source="payment",
    kind="payment",
)
BOUGHT = ClassificationFacts("mid_market", "buy", 2, "Ein Angebot.", "de")
PAID_ANSWER = LeadClassification.model_validate(
    {**VALID, "segment": "small_business", "intent": "question", "priority": 3,
     "summary": "Bezahlt.", "language": "en"}
)  # fmt: skip


def test_classification_text_tells_of_a_payment_and_the_persons_earlier_events() -> None:
    form = EarlierEvent(
        kind="form", received_at=datetime(2026, 3, 2, 9, tzinfo=UTC),
        page="https://shop.example/preise?name=Julia", message=MESSAGE,
    )  # fmt: skip
    text = classification_text(PAYMENT, None, [form])
    assert "Paid with this event: 4900 JPY" in text.splitlines()
    earlier = text.split("Earlier events of this person (oldest first):\n")[1]
    line = earlier.splitlines()[0]
    assert line.startswith("- 2026-03-02, form, page https://shop.example/preise, message: Guten")
    assert "julia.hoffmann@" not in text  # masked
    assert "JULIA HOFFMANN" not in text  # the person's name taken out
    assert text.endswith("Message:\n(no message)")
    unknown = PAYMENT.model_copy(update={"currency": "XYZ", "amount_unit": "minor"})
    assert "Paid with this event: 4900 minor units of XYZ" in classification_text(unknown)


@pytest.mark.parametrize(
    ("has_message", "standing", "most_urgent", "expected"),
    [
        # A payment after a message: what the message said stands; the answer's summary is kept.
        (False, BOUGHT, 2, ("mid_market", "buy", 2, "de", "Bezahlt.")),
        # A payment before any message: the answer is the person's.
        (False, None, None, ("small_business", "question", 3, "en", "Bezahlt.")),
        # A new message reclassifies, but never less urgent than they were.
        (True, BOUGHT, 2, ("small_business", "question", 2, "en", "Bezahlt.")),
        (True, BOUGHT, 4, ("small_business", "question", 3, "en", "Bezahlt.")),
    ],
)
def test_classification_for_the_person_keeps_what_a_message_said_and_the_urgency(
    has_message: bool,
    standing: ClassificationFacts | None,
    most_urgent: int | None,
    expected: tuple[str, str, int, str, str],
) -> None:
    theirs = for_the_person(
        PAID_ANSWER, has_message=has_message, standing=standing, most_urgent=most_urgent
    )
    assert (theirs.segment, theirs.intent, theirs.priority, theirs.language, theirs.summary) == (
        expected
    )
