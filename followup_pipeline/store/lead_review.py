"""Settling a lead's review item (docs/architecture.md §9): a model answer about a lead event
that failed its check waits in the review list with its raw text. Accepting it stores the answer
(or an operator's corrected one) as the event's classification, once, if it passes ``lead.v2``;
rejecting it ends the lead's classification with the operator's reason. Either is recorded
under the event's step ``review``, so a second decision finds it settled, and puts the event back
to pending: its next step, the CRM write, runs (with the classification, or without one)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg

from followup_pipeline.domain.classification import (
    ClassificationRejected,
    for_the_person,
    parse_classification,
)
from followup_pipeline.store import events
from followup_pipeline.store import lead_person as person
from followup_pipeline.store.enrichments import ReviewItem, resolve_review_item
from followup_pipeline.store.lead_crm import reopen_event
from followup_pipeline.store.lead_enrichment import (
    Classified,
    lead_of_event,
    store_classification,
)

#: The review list's subject type of a lead event's model answer.
LEAD_SUBJECT = "LeadEvent"


class LeadReviewError(ValueError):
    """A lead's item that cannot be settled as asked."""


def decide_lead(
    conn: psycopg.Connection[Any],
    item: ReviewItem,
    *,
    action: str,
    answer: str | None,
    reason: str | None,
    now: datetime,
) -> str:
    """Accept or reject a lead event's review item (inside the caller's transaction)."""
    event_id = int(item.subject_id)
    key = f"{event_id}:0:review"
    if action == "reject":
        why = reason or "rejected by an operator"
        events.complete(conn, key=key, event_id=event_id, result={"rejected": why})
        resolve_review_item(conn, item.id, resolution="rejected", now=now)
        reopen_event(conn, event_id)
        return (
            f"review item {item.id} rejected ({why}): lead event {event_id} goes on to the CRM "
            "without a classification"
        )
    text = answer if answer is not None else item.raw_output
    try:
        # Accepting is the operator's word for the facts (the model's answer, or their own, as
        # for a deal's summary): only the schema is checked.
        checked = parse_classification(text, facts=item.source_text or "", check_facts=False)
    except ClassificationRejected as rejected:
        raise LeadReviewError(
            f"review item {item.id}: {rejected.reason} (accept with a corrected answer: "
            "--answer '{…lead.v2…}', or reject it)"
        ) from None
    lead_id = lead_of_event(conn, event_id)
    if lead_id is None:
        raise LeadReviewError(f"lead event {event_id} has no lead")
    from_message = person.has_message(conn, event_id)
    theirs = checked
    if answer is None:
        # The model's answer accepted: the person's classification, as for a checked one. An
        # operator's own answer is their word, taken as it is.
        standing = person.standing(conn, lead_id)
        theirs = for_the_person(
            checked,
            has_message=from_message,
            standing=standing.from_message,
            most_urgent=standing.most_urgent,
        )
    stored = store_classification(
        conn,
        Classified.of(
            theirs,
            event_id=event_id,
            lead_id=lead_id,
            model=item.model,
            source="review",
            from_message=from_message,
            answer=checked,
        ),
        now=now,
    )
    events.complete(conn, key=key, event_id=event_id, result={"accepted": stored})
    resolve_review_item(conn, item.id, resolution="accepted", now=now)
    reopen_event(conn, event_id)
    return f"review item {item.id} accepted: lead event {event_id} is classified, on to the CRM"
