"""Settling a review item (CLI and the ``review`` job alike): accept stores the item's lines
(or an operator's corrected ones) as the deal's summary; reject leaves the deal without a new
summary until its e-mails change (the item's input stays the deal's latest input)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import psycopg

from followup_pipeline.domain.summaries import SummaryContext, SummaryRejected, summary_from
from followup_pipeline.store.enrichments import (
    NewSummary,
    latest_input_hash,
    resolve_review_item,
    review_item,
    store_summary,
)
from followup_pipeline.store.lead_review import LEAD_SUBJECT, LeadReviewError, decide_lead

ACTIONS = ("accept", "reject")


class ReviewError(ValueError):
    """An item that cannot be settled as asked (unknown, settled already, lines unusable)."""


def decide(
    conn: psycopg.Connection[Any],
    item_id: int,
    *,
    action: str,
    lines: tuple[str | None, str | None] | None,
    max_chars: int,
    now: datetime,
    answer: str | None = None,
    reason: str | None = None,
) -> str:
    """Accept or reject item ``item_id`` (call inside a transaction); what was done, in words.
    A lead's item is settled by ``lead_review.decide_lead`` (``answer``: a corrected lead.v2
    answer; ``reason``: why it is rejected)."""
    if action not in ACTIONS:
        raise ReviewError(f"action {action!r}: use one of {', '.join(ACTIONS)}")
    item = review_item(conn, item_id, lock=True)
    if item is None:
        raise ReviewError(f"no review item {item_id}")
    if item.resolved_at is not None:
        raise ReviewError(f"review item {item_id} was {item.resolution} already")
    lead = item.subject_type == LEAD_SUBJECT
    if lead and lines is not None:
        raise ReviewError(f"review item {item_id} is a lead's: correct it with --answer, not lines")
    if not lead and answer is not None:  # a deal's reason is kept in the audit only
        raise ReviewError(
            f"review item {item_id} is a deal's summary: correct it with --line1/--line2"
        )
    if lead:
        try:
            return decide_lead(conn, item, action=action, answer=answer, reason=reason, now=now)
        except LeadReviewError as error:
            raise ReviewError(str(error)) from None
    if action == "accept" and latest_input_hash(conn, item.subject_id) != item.input_hash:
        raise ReviewError(
            f"review item {item_id}: deal {item.subject_id} has a newer summary or review item; "
            "accepting this older one would replace it (reject it instead)"
        )
    if action == "reject":
        resolve_review_item(conn, item_id, resolution="rejected", now=now)
        return f"review item {item_id} rejected: deal {item.subject_id} keeps no new summary"
    line1, line2 = _lines(item.raw_output, lines, item_id)
    context = SummaryContext(
        deal_name=item.deal_name or "",
        source_text=item.source_text or "",
        max_chars=max_chars,
        typed_by_operator=True,
    )
    try:
        checked = summary_from({"line1": line1, "line2": line2}, context)
    except SummaryRejected as rejected:
        raise ReviewError(f"review item {item_id}: {rejected.reason}") from None
    summary = NewSummary(
        subject_id=item.subject_id,
        input_hash=item.input_hash,
        line1=checked.line1,
        line2=checked.line2,
        model=item.model,
        prompt_tokens=None,
        completion_tokens=None,
        source="review",
    )
    store_summary(conn, summary, now=now)
    resolve_review_item(conn, item_id, resolution="accepted", now=now)
    return f"review item {item_id} accepted: deal {item.subject_id}'s summary is stored"


def _lines(
    raw_output: str, lines: tuple[str | None, str | None] | None, item_id: int
) -> tuple[object, object]:
    """The lines to accept: the operator's, else the model's own if its answer has both."""
    if lines is not None:
        if not (lines[0] and lines[0].strip() and lines[1] and lines[1].strip()):
            raise ReviewError(f"review item {item_id}: give both --line1 and --line2")
        return lines[0], lines[1]
    try:
        answer = json.loads(raw_output)
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or not {"line1", "line2"} <= set(answer):
        raise ReviewError(
            f"review item {item_id}: the model's answer has no two lines to accept; "
            "give --line1 and --line2"
        )
    return answer["line1"], answer["line2"]
