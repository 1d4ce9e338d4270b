"""The check of a model's summary: what makes two lines usable, and why an answer is not.

A summary is used only when it is exactly two non-empty lines, each at most ``max_chars`` long,
neither merely the deal's name, and every number in it (an amount, a date, a percentage) occurs
in the e-mails that were sent. Anything else goes to the review list with the reason.

The check for invented facts is shared: ``invented_numbers`` is the summaries' own, and
``invented_facts`` (numbers, e-mail addresses and URLs) is what other free text a model writes
from our input is held to (``domain.classification``).
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator

from followup_pipeline.domain.emails import EMAIL_ADDRESS

#: A number as people write one: 15.000, 15,000.50, 12.03.2026, 20 %, 3.
NUMBER = re.compile(r"\d+(?:[.,:/]\d+)*")
#: A URL as a model writes one: with its scheme, or starting ``www.``; up to a space or a bracket.
URL = re.compile(r"(?:https?://|www\.)[^\s<>\"'()\[\]{}]+", re.IGNORECASE)


class SummaryContext(BaseModel):
    """What the check compares a summary with."""

    model_config = ConfigDict(frozen=True)

    deal_name: str
    source_text: str
    max_chars: int = 160
    #: Lines an operator typed: only their shape is checked, not their facts.
    typed_by_operator: bool = False


def numbers_in(text: str) -> set[str]:
    """The digits of each number in ``text`` (``15.000`` and ``15,000`` are both ``15000``)."""
    return {re.sub(r"\D", "", number) for number in NUMBER.findall(text)}


def invented_numbers(text: str, source: str) -> list[str]:
    """The numbers of ``text`` (by their digits, sorted) that ``source`` does not hold: a model
    that writes an amount, a date or a percentage must have read it in what it was sent."""
    return sorted(numbers_in(text) - numbers_in(source))


def _urls_in(text: str) -> list[str]:
    return [url.rstrip(".,;:!?") for url in URL.findall(text)]


def invented_facts(text: str, source: str) -> list[str]:
    """What ``text`` states that ``source`` does not hold, each named (``number 15000``,
    ``e-mail address a@b.example``, ``URL https://…``): numbers as ``invented_numbers`` compares
    them, e-mail addresses whole (case aside), URLs as part of the source (case aside). With the
    personal data of the source masked, any address in ``text`` is one the model made up."""
    facts = [f"number {number}" for number in invented_numbers(text, source)]
    known = {address.casefold() for address in EMAIL_ADDRESS.findall(source)}
    for address in EMAIL_ADDRESS.findall(text):
        if address.casefold() not in known:
            facts.append(f"e-mail address {address}")
    haystack = source.casefold()
    for url in _urls_in(text):
        if url.casefold() not in haystack:
            facts.append(f"URL {url}")
    return facts


def _letters(text: str) -> str:
    return re.sub(r"[\W_]+", " ", text.casefold()).strip()


class CheckedSummary(BaseModel):
    """Two lines that passed every check (validate with ``context=SummaryContext``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    line1: str
    line2: str

    @field_validator("line1", "line2")
    @classmethod
    def _usable(cls, value: str, info: ValidationInfo) -> str:
        context = info.context
        if not isinstance(context, SummaryContext):
            raise ValueError("checked without its context (deal name and e-mails)")
        line = value.strip()
        if not line:
            raise ValueError("the line is empty")
        if "\n" in line or "\r" in line:
            raise ValueError("the line holds more than one line")
        if len(line) > context.max_chars:
            raise ValueError(f"the line has {len(line)} characters, more than {context.max_chars}")
        if context.typed_by_operator:
            return line
        name = _letters(context.deal_name)
        if name and not _letters(line).replace(name, "").strip():
            raise ValueError("the line only repeats the deal's name")
        invented = invented_numbers(line, context.source_text)
        if invented:
            raise ValueError(f"number(s) {', '.join(invented)} do not occur in the e-mails")
        return line


class SummaryRejected(ValueError):
    """A model answer that is not a usable summary; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def check_summary(answer: str, context: SummaryContext) -> CheckedSummary:
    """The checked summary in a model's raw answer (JSON ``{"line1", "line2"}``), or
    ``SummaryRejected`` naming the first problem."""
    try:
        return CheckedSummary.model_validate_json(answer, context=context)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "answer"
        message = str(first["msg"]).removeprefix("Value error, ")
        raise SummaryRejected(f"{where}: {message}") from None


def summary_from(lines: dict[str, Any], context: SummaryContext) -> CheckedSummary:
    """The same check for lines an operator typed (accepting a review item)."""
    try:
        return CheckedSummary.model_validate(lines, context=context)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "lines"
        raise SummaryRejected(
            f"{where}: {str(first['msg']).removeprefix('Value error, ')}"
        ) from None
