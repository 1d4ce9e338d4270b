"""The lead intake's first step, ``normalise``: one claimed event of a lead source becomes one
person's lead (docs/architecture.md §9).

The worker (``engine/worker.py``) claims, charges attempts, backs off with jitter and dead-letters;
this handler parses the event's body into a ``LeadIn`` and writes it with the step's completion
key ``{event_id}:0:normalise`` in one transaction (then the next steps, ``enrich.py``,
``classify.py`` and ``upsert.py``, each with its own key; the last marks the event done): a retry
or a replay under the original id finds the key and writes nothing twice. A body that makes no
lead (a field missing or wrong) is a dead letter at once, naming the field; a payment event that
is no paid checkout, and a CRM Lead without an e-mail address, are done and counted ``ignored``.
A payment in a currency ``domain/money.py`` does not know keeps its amount in minor units,
counted ``unknown_currency`` and named in a warning.
"""

import logging
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import psycopg

from followup_pipeline.defs.lead_intake.classify import Classifier
from followup_pipeline.defs.lead_intake.enrich import CompanyLookup, Enricher
from followup_pipeline.defs.lead_intake.upsert import CrmUpserter
from followup_pipeline.domain.companies import CompanyFacts
from followup_pipeline.domain.leads import (
    LeadIn,
    LeadRejected,
    from_crm_lead,
    from_payment,
    from_site_form,
)
from followup_pipeline.engine.worker import ItemFailed, WorkerRun, completion_key
from followup_pipeline.integrations.resources import (
    CompanyLookupResource,
    EspoCrmResource,
    MistralResource,
)
from followup_pipeline.resources import ClockResource
from followup_pipeline.settings import Settings
from followup_pipeline.store import events, lead_mode, leads
from followup_pipeline.store.events import Event
from followup_pipeline.store.lead_enrichment import lead_by_id

STEP = "normalise"
LOG = logging.getLogger(__name__)


class LeadNormaliser:
    """The handler of the lead sources' events, for the engine's worker (and a replay)."""

    def __init__(self, conn: psycopg.Connection[Any], settings: Settings) -> None:
        self.conn = conn
        self.counts: Counter[str] = Counter()
        #: The steps after ``normalise``, when the capability has its vendors.
        self.next_steps: NextSteps | None = None
        #: Lead intake's mode at the run's start (each CRM write reads it again).
        self.mode: lead_mode.InForce | None = None
        #: What the run's log should warn of (a currency not in the table).
        self.warnings: list[str] = []
        fields = settings.site_form_fields
        self.parsers: Mapping[str, Callable[[bytes], LeadIn | None]] = {
            "site-form": lambda body: from_site_form(body, fields),
            "payment": from_payment,
            "crm-changes": from_crm_lead,
        }

    def handle(self, event: Event, done: set[str]) -> bool:
        """The event's steps not done yet: ``normalise`` (its lead), then, when the capability
        has its vendors, ``enrich`` and ``classify``; True when it marked the event done (or
        put it back for later) itself."""
        self.counts["received"] += 1
        body = bytes(event.body) if event.body is not None else b""
        parser = self.parsers.get(event.source)
        if parser is None:
            raise ItemFailed("source", f"no lead parser for {event.source!r}", permanent=True)
        try:
            lead = parser(body)  # the body says the same on every attempt: read it each time
        except LeadRejected as rejected:
            self.counts["rejected"] += 1
            raise ItemFailed(
                f"0:{STEP}", f"{event.source} body: {rejected}", permanent=True
            ) from None
        if lead is None:
            self.counts["ignored"] += 1
            return False
        key = completion_key(event.id, 0, STEP)
        if key in done:
            self.counts["already_done"] += 1
            with self.conn.transaction():
                results = {c.key: c.result for c in events.completions_of(self.conn, event.id)}
            lead_id = int(str(results[key]["lead_id"]))
        else:
            lead_id = self.normalise(event, lead, last=self.next_steps is None)
        if self.next_steps is None:
            return key not in done
        # The worker's dispatcher may have given this handler its shared counter since.
        self.next_steps.enricher.counts = self.next_steps.classifier.counts = self.counts
        return self.next_steps.run(event, lead_id, lead, done)

    def normalise(self, event: Event, lead: LeadIn, *, last: bool) -> int:
        """Write the lead and the step's key (and mark the event done if it is the last step),
        in one transaction; the lead's id."""
        key = completion_key(event.id, 0, STEP)
        row = leads.LeadRow(
            email=lead.email,
            source=event.source,
            kind=lead.kind,
            at=event.received_at,
            name=lead.name,
            company=lead.company,
            phone=lead.phone,
            consent=lead.consent,
            amount=lead.amount,
            currency=lead.currency,
            amount_unit=lead.amount_unit,
            page=lead.page,
            message=lead.message,
            crm_lead_id=lead.crm_lead_id,
        )
        with self.conn.transaction():
            linked = leads.link_event(self.conn, event_id=event.id, lead=row)
            result = {"lead_id": linked.lead_id, "created": linked.created}
            events.complete(self.conn, key=key, event_id=event.id, result=result)
            if last:
                events.mark_done(self.conn, event.id)
        self.counts["normalised"] += 1
        self.counts["new_leads" if linked.created else "duplicates"] += 1
        if lead.amount_unit == "minor":
            self.counts["unknown_currency"] += 1
            warning = (
                f"event {event.id} ({event.delivery_id}): currency {lead.currency!r} is not in "
                f"the table of minor units: its amount {lead.amount} is kept in minor units "
                "(lead_events.amount_unit 'minor'), not written to the CRM"
            )
            LOG.warning("%s", warning)
            self.warnings.append(warning)
        return linked.lead_id

    def crm_modes(self) -> set[str]:
        """The modes (shadow, live) this run's CRM writes were made in."""
        upserter = self.next_steps.upserter if self.next_steps is not None else None
        return upserter.modes if upserter is not None else set()


class NextSteps:
    """``enrich``, ``classify`` and ``crm_upsert``, each skipped when its key is done."""

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        enricher: Enricher,
        classifier: Classifier,
        clock: Callable[[], datetime],
        upserter: CrmUpserter | None = None,
    ) -> None:
        self.conn = conn
        self.enricher = enricher
        self.classifier = classifier
        self.clock = clock
        #: The CRM write; without the CRM (a replay job that has none) the event ends classified.
        self.upserter = upserter

    def run(self, event: Event, lead_id: int, lead: LeadIn, done: set[str]) -> bool:
        """The steps not done yet; True (the last one marks the event done or defers it)."""
        now = self.clock()
        enrich_key = completion_key(event.id, 0, "enrich")
        if enrich_key in done:
            with self.conn.transaction():
                row = lead_by_id(self.conn, lead_id)
            company = CompanyFacts.from_json(row.company_facts) if row is not None else None
        else:
            company = self.enricher.run(event, lead_id, lead, now=now)
        classify_key = completion_key(event.id, 0, "classify")
        if classify_key in done:
            with self.conn.transaction():
                results = {c.key: c.result for c in events.completions_of(self.conn, event.id)}
            waits = "review_item" in results[classify_key]
            decided = completion_key(event.id, 0, "review") in done
            if waits and not decided:  # a person decides first; the decision reopens it
                with self.conn.transaction():
                    events.mark_done(self.conn, event.id)
                return True
        elif self.classifier.run(event, lead_id, lead, company, now=now) != "classified":
            return True
        if self.upserter is None:
            with self.conn.transaction():
                events.mark_done(self.conn, event.id)
            return True
        self.upserter.counts = self.classifier.counts
        return self.upserter.run(event, lead_id, now=now)


def make_normaliser(run: WorkerRun) -> LeadNormaliser:
    """The lead sources' handler for one run: with the ``company_lookup`` and ``mistral``
    resources, all its steps (``crm_upsert`` too with ``espocrm``, on the run's database and
    scope); without them, ``normalise`` alone."""
    conn, settings, resources = run.conn, run.settings, run.resources
    handler = LeadNormaliser(conn, settings)
    companies, mistral = resources.get("company_lookup"), resources.get("mistral")
    clock, crm = resources.get("clock"), resources.get("espocrm")
    if isinstance(companies, CompanyLookupResource) and isinstance(mistral, MistralResource):
        counts = handler.counts
        with conn.transaction():
            handler.mode = lead_mode.in_force(conn, settings)
        lookup = CompanyLookup(companies.get_client()) if settings.company_lookup_api_key else None
        writer = (
            crm.lead_writer(tuple(settings.lead_crm_fields.values()))
            if isinstance(crm, EspoCrmResource)
            else None
        )
        handler.next_steps = NextSteps(
            conn,
            Enricher(conn, lookup, counts),
            Classifier(conn, mistral.get_client(), settings, counts),
            clock.now if isinstance(clock, ClockResource) else lambda: datetime.now(UTC),
            CrmUpserter(run, writer, counts) if writer is not None else None,
        )
    return handler
