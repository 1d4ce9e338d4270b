"""A lead's classification by the model (docs/architecture.md §9): the check of what comes back
(the text sent is ``lead_text.py``'s), and how an answer becomes the person's classification.
Pure code but for reading the schema shipped with the package.

``lead.v2`` exists twice, and a test keeps the two in agreement: as a JSON Schema
(``schemas/lead.v2.json``), which the request hands the model, and as ``LeadClassification``,
which decides whether an answer is used. An answer is used only when it is JSON, follows lead.v2
to the letter, and its free text (the summary and the reasons) states no number, e-mail address
or URL that the text sent does not hold (``summaries.invented_facts``, shared with the summaries'
check). Anything else is a ``ClassificationRejected`` with the raw answer, for the review list.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from followup_pipeline.domain.crm_lead import ClassificationFacts
from followup_pipeline.domain.summaries import invented_facts

#: The schema's name and its file, shipped as package data (pyproject's package-data).
SCHEMA_NAME = "lead.v2"
SCHEMA_FILE = "lead.v2.json"
#: The bounds of lead.v2, as the JSON Schema states them.
SUMMARY_MAX = 200
REASON_MAX = 200
REASONS_MAX = 5
PRIORITY_MOST_URGENT, PRIORITY_LEAST_URGENT = 1, 4
#: The longest reason a rejection carries (the review list shows it in one line).
REASON_LIMIT = 500

Segment = Literal["enterprise", "mid_market", "small_business", "individual", "unknown"]
Intent = Literal["buy", "trial", "question", "support", "partnership", "spam", "unknown"]


def _whole_number(value: Any) -> Any:
    """A float without a fraction as the integer it is: JSON Schema's ``integer`` takes ``2.0``,
    and the model's check must judge an answer as the schema does (``True`` stays no integer)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Reason = Annotated[str, Field(min_length=1, max_length=REASON_MAX)]


class LeadClassification(BaseModel):
    """lead.v2: who the lead is, what they want, how urgent, in which language, and why.

    Strict (no coercion of ``"2"`` to 2) and closed (no other field), as the JSON Schema is;
    ``schemas/lead.v2.json`` says the same, field for field."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    segment: Segment
    intent: Intent
    priority: Annotated[int, BeforeValidator(_whole_number)] = Field(
        ge=PRIORITY_MOST_URGENT, le=PRIORITY_LEAST_URGENT
    )
    summary: str = Field(min_length=1, max_length=SUMMARY_MAX)
    language: str = Field(min_length=2, max_length=2, pattern=r"^[a-z]{2}$")
    reasons: list[Reason] = Field(min_length=1, max_length=REASONS_MAX)


class ClassificationRejected(ValueError):
    """A model answer that is no usable classification: ``reason`` says why (naming the field),
    ``raw`` is the answer as it came (kept with the review item)."""

    def __init__(self, reason: str, raw: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.raw = raw


@functools.cache
def _schema_text() -> str:
    schemas = resources.files("followup_pipeline.domain") / "schemas"
    return (schemas / SCHEMA_FILE).read_text(encoding="utf-8")


def lead_v2_schema() -> dict[str, Any]:
    """The JSON Schema of lead.v2 as the package ships it (a fresh copy: callers may change it)."""
    schema: dict[str, Any] = json.loads(_schema_text())
    return schema


def for_the_person(
    answer: LeadClassification,
    *,
    has_message: bool,
    standing: ClassificationFacts | None,
    most_urgent: int | None,
) -> LeadClassification:
    """The person's classification after this event's ``answer``: an event with no message of
    its own (a payment) does not reclassify them: what their ``standing`` classification from a
    message says (segment, intent, language) stands, the answer adds its summary of the new
    facts; and the priority never becomes less urgent than the ``most_urgent`` they had (a
    person changes it in the CRM, where a value not ours is never overwritten)."""
    priority = min(answer.priority, most_urgent) if most_urgent is not None else answer.priority
    if has_message or standing is None:
        return answer.model_copy(update={"priority": priority})
    kept = {"segment": standing.segment, "intent": standing.intent, "language": standing.language}
    return answer.model_copy(update={**kept, "priority": priority})


def _where(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) or "answer"


def _bounded(reason: str) -> str:
    return reason if len(reason) <= REASON_LIMIT else reason[: REASON_LIMIT - 1] + "…"


def parse_classification(
    raw_text: str, *, facts: str, check_facts: bool = True
) -> LeadClassification:
    """The classification in a model's raw answer, or ``ClassificationRejected`` saying why: not
    JSON; breaks lead.v2 (each field named, ``priority: Input should be less than or equal to
    4``); a summary or reason that is blank, or states a fact (number, e-mail address, URL) that
    ``facts``, the text that was sent, does not hold. ``check_facts=False`` for an answer an
    operator typed: their word is taken for the facts, the schema still holds."""
    try:
        data = json.loads(raw_text)
    except (ValueError, RecursionError) as error:
        raise ClassificationRejected(f"not JSON ({type(error).__name__})", raw_text) from None
    try:
        answer = LeadClassification.model_validate(data)
    except ValidationError as error:
        problems = [
            f"{_where(tuple(problem['loc']))}: {problem['msg']}" for problem in error.errors()
        ]
        reason = _bounded(f"breaks {SCHEMA_NAME}: " + "; ".join(problems))
        raise ClassificationRejected(reason, raw_text) from None
    texts = [("summary", answer.summary)]
    texts += [(f"reasons.{index}", reason) for index, reason in enumerate(answer.reasons)]
    for where, text in texts:
        if not text.strip():
            raise ClassificationRejected(f"{where}: blank", raw_text)
        invented = invented_facts(text, facts) if check_facts else []
        if invented:
            reason = f"{where}: {', '.join(invented)} not in the input (invented)"
            raise ClassificationRejected(_bounded(reason), raw_text)
    return answer
