"""Erasure (``followup erase deal ID``, ``followup erase person EMAIL``): the names, e-mail texts,
summaries and addresses we keep of a deal or a person go, in one transaction; the rows, their
keys, dates and counts stay (a week's figures do not change). What lives with a vendor (ClickUp
tasks, mail sent, the CRM's Lead, a credential, Moodle's learner) cannot be erased from here: it
is listed, so an operator can erase it there."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import psycopg

from followup_pipeline.store.queries import query

#: What replaces an erased name in free text.
ERASED = "[erased]"


@dataclass
class Erased:
    """What an erasure changed (rows per kind) and what it could not reach."""

    changed: dict[str, int] = field(default_factory=dict)
    elsewhere: list[str] = field(default_factory=list)
    pending_events: int = 0

    def count(self, what: str, rows: list[Any]) -> None:
        self.changed[what] = self.changed.get(what, 0) + len(rows)


def _texts(conn: psycopg.Connection[Any], erased: Erased, texts: list[str]) -> None:
    """Each text (a name, an address) out of webhook bodies, alerts and review items."""
    for text in texts:
        erased.count("webhook bodies", conn.execute(
            query("erase_event_bodies_naming"), {"text": text}).fetchall())  # fmt: skip
        erased.count("alerts", conn.execute(query("erase_text_in_alerts"), {"text": text})
                     .fetchall())  # fmt: skip
        erased.count("review items", conn.execute(
            query("erase_text_in_review_items"), {"text": text}).fetchall())  # fmt: skip
        row = conn.execute(query("erase_pending_events_naming"), {"text": text}).fetchone()
        erased.pending_events += int(row["n"]) if row else 0


def erase_deal(conn: psycopg.Connection[Any], deal_id: str) -> Erased:
    """Erase what we keep of a deal (in the caller's transaction)."""
    erased = Erased()
    names = [str(r["name"]) for r in conn.execute(query("erase_deal_names"), {"deal": deal_id})]
    params = {"deal": deal_id}
    erased.count("watches", conn.execute(query("erase_deal_watches"), params).fetchall())
    erased.count("summaries", conn.execute(query("erase_deal_summaries"), params).fetchall())
    erased.count("review items", conn.execute(query("erase_deal_review_items"), params).fetchall())
    _texts(conn, erased, [deal_id, *names])
    tasks = [str(r["ref"]) for r in conn.execute(query("erase_deal_vendor_objects"), params)]
    mails = [str(r["ref"]) for r in conn.execute(query("erase_deal_mails"), params)]
    erased.elsewhere += [f"ClickUp task {ref}: its name and text name the deal" for ref in tasks]
    erased.elsewhere += [f"mail {key} (sent; a copy in the sender's Sent Items)" for key in mails]
    erased.elsewhere.append(f"the CRM's deal {deal_id} itself (EspoCRM)")
    return erased


def erase_person(conn: psycopg.Connection[Any], email: str) -> Erased:
    """Erase what we keep of a person by their address (in the caller's transaction): their
    lead, its events' bodies and messages, its classifications and CRM writes, and what the
    learning reminders keep of them as a learner."""
    erased = Erased()
    leads = conn.execute(query("erase_person_leads"), {"email": email}).fetchall()
    erased.count("leads", leads)
    lead_ids = [int(r["id"]) for r in leads]
    events = conn.execute(query("erase_person_lead_events"), {"leads": lead_ids}).fetchall()
    erased.count("lead events", events)
    event_ids = [int(r["event_id"]) for r in events]
    erased.count("webhook bodies", conn.execute(query("erase_events_by_id"),
                                                {"ids": event_ids}).fetchall())  # fmt: skip
    erased.count("classifications", conn.execute(
        query("erase_person_classifications"), {"leads": lead_ids}).fetchall())  # fmt: skip
    keys = [f"lead:{event_id}:crm_upsert" for event_id in event_ids]
    erased.count("CRM writes", conn.execute(query("erase_person_crm_writes"), {"keys": keys})
                 .fetchall())  # fmt: skip
    learners = conn.execute(query("erase_person_learners"), {"email": email}).fetchall()
    erased.count("learner assignments", learners)
    credentials = conn.execute(query("erase_person_certificates"), {"email": email}).fetchall()
    erased.count("certificates", credentials)
    _texts(conn, erased, [email])
    erased.elsewhere += [
        f"the CRM's Lead {r['crm_lead_id']} (EspoCRM; the nightly sweep reads it again while it "
        "is there)"
        for r in leads
        if r["crm_lead_id"]
    ]
    erased.elsewhere += [
        f"credential {r['credential_id']} (Accredible)" for r in credentials if r["credential_id"]
    ]
    erased.elsewhere += sorted(
        {
            f"learner {r['learner_id']} of {r['tenant_id']} in Moodle (the next sync reads them "
            "again while they are enrolled), and the reminders sent to them"
            for r in learners
        }
    )
    return erased
