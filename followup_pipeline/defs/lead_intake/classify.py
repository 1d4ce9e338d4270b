"""The lead intake's ``classify`` step (docs/architecture.md §9): what the person wants. The model
is told of the person (``domain/lead_text.py``: this event, their earlier events, the company
facts), and its answer is checked against ``lead.v2`` before anything uses it; one that fails
waits in the review list with its raw text. The classification is the person's: an event with no
message of its own (a payment) adds its facts but does not reclassify them, and the priority
never becomes less urgent (``classification.for_the_person``).

A step of the event's item 0, recorded under ``{event_id}:0:classify`` with its writes; a vendor
that fails for now is an ``ItemFailed`` (a retry with backoff, then a dead letter that a replay
finishes where it stopped).
"""

from collections import Counter
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol

import psycopg

from followup_pipeline.domain.classification import (
    ClassificationRejected,
    for_the_person,
    parse_classification,
)
from followup_pipeline.domain.companies import CompanyFacts
from followup_pipeline.domain.lead_text import classification_text
from followup_pipeline.domain.leads import LeadIn
from followup_pipeline.engine.worker import ItemFailed, completion_key
from followup_pipeline.integrations.errors import IntegrationError, PermanentError
from followup_pipeline.integrations.mistral import ModelAnswer
from followup_pipeline.settings import Settings
from followup_pipeline.store import enrichments, events
from followup_pipeline.store import lead_enrichment as store
from followup_pipeline.store import lead_person as person
from followup_pipeline.store.events import Event
from followup_pipeline.store.lead_review import LEAD_SUBJECT

#: The review list's subject type of a lead event's model answer.
REVIEW_SUBJECT = LEAD_SUBJECT
#: How ``classify`` ended: the lead goes on to the CRM, waits for a person, or for the budget.
Classified = Literal["classified", "review", "deferred"]


class LeadModel(Protocol):
    """What ``classify`` needs of the model."""

    @property
    def model(self) -> str:
        """The model's name."""
        ...

    def classify_lead(self, text: str) -> ModelAnswer:
        """A ``lead.v2`` answer for ``text``, unchecked."""
        ...


class Classifier:
    """The ``classify`` step: one model answer, checked; a failing one goes to review."""

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        model: LeadModel,
        settings: Settings,
        counts: Counter[str],
    ) -> None:
        self.conn = conn
        self.model = model
        self.settings = settings
        self.counts = counts

    def budget_left(self, now: datetime) -> bool:
        """Whether the model's hourly spend (summaries and classifications together) allows a
        call now."""
        with self.conn.transaction():
            spent = store.model_spend_since(self.conn, now - timedelta(hours=1))
        return (
            spent.calls < self.settings.enrich_budget_calls
            and spent.tokens < self.settings.enrich_budget_tokens
        )

    def run(
        self,
        event: Event,
        lead_id: int,
        lead: LeadIn,
        company: CompanyFacts | None,
        *,
        now: datetime,
    ) -> Classified:
        """Classify (``classified``: the next step goes on), send the answer to review (the
        event is done until a person decides), or defer the event to the next hour when the
        budget is spent."""
        key = completion_key(event.id, 0, "classify")
        if event.source == "crm-changes":
            # A CRM edit of a lead already classified says nothing new of what they want: a
            # bulk edit in the CRM must not spend the model's hour.
            with self.conn.transaction():
                known = store.lead_classified(self.conn, lead_id)
            if known:
                with self.conn.transaction():
                    events.complete(
                        self.conn, key=key, event_id=event.id, result={"skipped": "classified"}
                    )
                self.counts["already_classified"] += 1
                return "classified"
        if not self.budget_left(now):
            with self.conn.transaction():
                store.defer_event(self.conn, event.id, wait=timedelta(hours=1))
            self.counts["deferred_by_budget"] += 1
            return "deferred"
        with self.conn.transaction():
            earlier = person.earlier_events(
                self.conn, lead_id=lead_id, event_id=event.id, before=event.received_at
            )
            standing = person.standing(self.conn, lead_id)
        facts = company.as_json() if company is not None else None
        text = classification_text(lead, facts, earlier)
        try:
            answer = self.model.classify_lead(text)
        except PermanentError as error:
            if error.status in (400, 422):  # this input refused: a person looks at it
                return self.to_review(event, lead, text, raw="", reason=str(error), now=now)
            raise ItemFailed("0:classify", f"the model refused: {error}") from None
        except IntegrationError as error:
            raise ItemFailed("0:classify", f"the model: {error}") from None
        usage = answer.usage
        try:
            checked = parse_classification(answer.text, facts=text)
        except ClassificationRejected as rejected:
            tokens = (usage.prompt_tokens, usage.completion_tokens)
            return self.to_review(
                event, lead, text, raw=answer.text, reason=rejected.reason, now=now,
                model=answer.model, tokens=tokens,
            )  # fmt: skip
        has_message = bool(lead.message)
        theirs = for_the_person(
            checked,
            has_message=has_message,
            standing=standing.from_message,
            most_urgent=standing.most_urgent,
        )
        if theirs != checked:
            self.counts["kept_the_persons"] += 1
        with self.conn.transaction():
            store.store_classification(
                self.conn,
                store.Classified.of(
                    theirs,
                    event_id=event.id,
                    lead_id=lead_id,
                    model=answer.model,
                    source="model",
                    tokens=(usage.prompt_tokens, usage.completion_tokens),
                    from_message=has_message,
                    answer=checked,
                ),
                now=now,
            )
            events.complete(self.conn, key=key, event_id=event.id, result={"classified": True})
        self.counts["classified"] += 1
        return "classified"

    def to_review(
        self,
        event: Event,
        lead: LeadIn,
        text: str,
        *,
        raw: str,
        reason: str,
        now: datetime,
        model: str | None = None,
        tokens: tuple[int | None, int | None] = (None, None),
    ) -> Classified:
        """Keep the answer (or the refusal) for a person, with the step's key: the lead waits in
        the review list; the event is done."""
        key = completion_key(event.id, 0, "classify")
        with self.conn.transaction():
            item = enrichments.store_review_item(
                self.conn,
                subject_id=str(event.id),
                deal_name=lead.company or f"lead event {event.id}",
                input_hash=f"lead:{event.id}",
                model=model or self.model.model,
                raw_output=raw,
                reason=reason,
                source_text=text,
                tokens=tokens,
                now=now,
                subject_type=REVIEW_SUBJECT,
            )
            events.complete(self.conn, key=key, event_id=event.id, result={"review_item": item})
            events.mark_done(self.conn, event.id)
        self.counts["sent_to_review"] += 1
        return "review"
