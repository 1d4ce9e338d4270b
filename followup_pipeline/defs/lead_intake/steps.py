"""The lead intake's steps after ``normalise`` (docs/architecture.md §9): ``enrich`` (who the
company is, by the e-mail's domain, asked once per domain while its answer holds) and
``classify`` (what the lead wants: a model answer checked against ``lead.v2`` before anything
uses it; one that fails waits in the review list with its raw text).

Each is one step of the event's item 0, recorded under ``{event_id}:0:{step}`` with its writes;
a vendor that fails for now is an ``ItemFailed`` (a retry with backoff, then a dead letter that a
replay finishes where it stopped).
"""

from collections import Counter
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol

import psycopg

from followup_pipeline.domain.classification import (
    ClassificationRejected,
    classification_text,
    parse_classification,
)
from followup_pipeline.domain.companies import CompanyFacts, company_domain
from followup_pipeline.domain.leads import LeadIn
from followup_pipeline.engine.worker import ItemFailed, completion_key
from followup_pipeline.integrations.company_lookup import CompanyLookupClient
from followup_pipeline.integrations.errors import IntegrationError, PermanentError
from followup_pipeline.integrations.mistral import ModelAnswer
from followup_pipeline.settings import Settings
from followup_pipeline.store import enrichments, events
from followup_pipeline.store import lead_enrichment as store
from followup_pipeline.store.events import Event
from followup_pipeline.store.lead_review import LEAD_SUBJECT

#: How long a company lookup holds (found or not): companies change slowly, lookups cost.
COMPANY_KEEP = timedelta(days=30)
#: The review list's subject type of a lead event's model answer.
REVIEW_SUBJECT = LEAD_SUBJECT
#: How ``classify`` ended: the lead goes on to the CRM, waits for a person, or for the budget.
Classified = Literal["classified", "review", "deferred"]


class CompanySource(Protocol):
    """What ``enrich`` needs of the company lookup: a company's facts by domain, None when the
    vendor does not know it."""

    def company_facts(self, domain: str) -> CompanyFacts | None:
        """The facts we keep of the company behind ``domain``."""
        ...


class LeadModel(Protocol):
    """What ``classify`` needs of the model."""

    @property
    def model(self) -> str:
        """The model's name."""
        ...

    def classify_lead(self, text: str) -> ModelAnswer:
        """A ``lead.v2`` answer for ``text``, unchecked."""
        ...


class CompanyLookup:
    """The company lookup as ``enrich`` needs it: the facts we keep of a company."""

    def __init__(self, client: CompanyLookupClient) -> None:
        self.client = client

    def company_facts(self, domain: str) -> CompanyFacts | None:
        """The company behind ``domain`` (None: the vendor does not know it)."""
        company = self.client.enrich(domain=domain)
        if company is None:
            return None
        location = company.location
        return CompanyFacts(
            name=company.display_name or company.name,
            industry=company.industry,
            size=company.size,
            employee_count=company.employee_count,
            founded=company.founded,
            country=location.country if location is not None else None,
            locality=location.locality if location is not None else None,
            website=company.website,
            linkedin_url=company.linkedin_url,
        )


class Enricher:
    """The ``enrich`` step: the lead's company facts, from the cache or one lookup (none when
    the lookup is off: no key configured)."""

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        companies: CompanySource | None,
        counts: Counter[str],
    ) -> None:
        self.conn = conn
        self.companies = companies
        self.counts = counts

    def run(
        self, event: Event, lead_id: int, lead: LeadIn, *, now: datetime
    ) -> CompanyFacts | None:
        """Look the company up (or not), record what it said with the step's key."""
        key = completion_key(event.id, 0, "enrich")
        domain = company_domain(lead.email)
        facts: CompanyFacts | None = None
        result: dict[str, Any] = {"domain": domain}
        if domain is None:
            self.counts["free_mail"] += 1
            result["skipped"] = "free_mail"
        elif self.companies is None:
            self.counts["lookup_off"] += 1
            result["skipped"] = "lookup_off"
        else:
            with self.conn.transaction():
                cached = store.cached_company(self.conn, domain, now=now)
            if cached is not None:
                self.counts["cached"] += 1
                facts = CompanyFacts.from_json(cached.company)
                result["cached"] = True
            else:
                try:
                    facts = self.companies.company_facts(domain)
                except PermanentError as error:
                    # Refused (a wrong key, no credits left): retrying cannot help, and the lead
                    # is worth more without company data than waiting for a new key.
                    self.counts["lookup_refused"] += 1
                    result["refused"] = str(error)[:200]
                except IntegrationError as error:
                    raise ItemFailed("0:enrich", f"company lookup: {error}") from None
                else:
                    with self.conn.transaction():
                        store.remember_company(self.conn, domain, facts, now=now, keep=COMPANY_KEEP)
                    self.counts["looked_up"] += 1
            result["found"] = facts is not None
            if facts is not None:
                self.counts["enriched"] += 1
        with self.conn.transaction():
            store.set_lead_company(self.conn, lead_id=lead_id, domain=domain, facts=facts)
            events.complete(self.conn, key=key, event_id=event.id, result=result)
        return facts


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
        text = classification_text(lead, company.as_json() if company is not None else None)
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
        with self.conn.transaction():
            store.store_classification(
                self.conn,
                store.Classified.of(
                    checked,
                    event_id=event.id,
                    lead_id=lead_id,
                    model=answer.model,
                    source="model",
                    tokens=(usage.prompt_tokens, usage.completion_tokens),
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
