"""The lead intake's ``enrich`` step (docs/architecture.md §9): who the person's company is, by
the e-mail's domain, asked once per domain while its answer holds (``classify.py`` follows).

A step of the event's item 0, recorded under ``{event_id}:0:enrich`` with its writes; a vendor
that fails for now is an ``ItemFailed`` (a retry with backoff, then a dead letter that a replay
finishes where it stopped).
"""

from collections import Counter
from datetime import datetime, timedelta
from typing import Any, Protocol

import psycopg

from followup_pipeline.domain.companies import CompanyFacts, company_domain
from followup_pipeline.domain.leads import LeadIn
from followup_pipeline.engine.worker import ItemFailed, completion_key
from followup_pipeline.integrations.company_lookup import CompanyLookupClient
from followup_pipeline.integrations.errors import IntegrationError, PermanentError
from followup_pipeline.store import events
from followup_pipeline.store import lead_enrichment as store
from followup_pipeline.store.events import Event

#: How long a company lookup holds (found or not): companies change slowly, lookups cost.
COMPANY_KEEP = timedelta(days=30)


class CompanySource(Protocol):
    """What ``enrich`` needs of the company lookup: a company's facts by domain, None when the
    vendor does not know it."""

    def company_facts(self, domain: str) -> CompanyFacts | None:
        """The facts we keep of the company behind ``domain``."""
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
