"""Erasure (``followup erase deal ID``, ``followup erase person EMAIL``): the names, e-mail texts,
summaries and addresses we keep of a deal or a person go, in one transaction; the rows, their
keys, dates and counts stay (a week's figures do not change). What lives with a vendor (ClickUp
tasks, mail sent, the CRM's Lead, a credential, Moodle's learner) cannot be erased from here: it
is listed, so an operator can erase it there."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import psycopg

from followup_pipeline.store.queries import query

#: What replaces an erased name in free text.
ERASED = "[erased]"
#: What keeps a copy for a while whatever is erased: said after every erasure.
KEPT_ELSEWHERE = [
    "the nightly backups (FOLLOWUP_BACKUP_DIR) keep a copy until FOLLOWUP_BACKUP_KEEP newer ones "
    "replace them",
    "Dagster's run logs keep what runs logged until FOLLOWUP_RETAIN_RUNS_DAYS (`followup purge`)",
]


@dataclass
class Erased:
    """What an erasure changed (rows per kind) and what it could not reach."""

    changed: dict[str, int] = field(default_factory=dict)
    elsewhere: list[str] = field(default_factory=list)
    pending_events: int = 0

    def count(self, what: str, rows: list[Any]) -> None:
        self.changed[what] = self.changed.get(what, 0) + len(rows)


def _texts(
    conn: psycopg.Connection[Any], erased: Erased, texts: list[str], *, bodies: list[str]
) -> None:
    """Each text (a name, an address) out of alerts, the ledger's errors, the review items and
    the catch-up queue; each of ``bodies`` (an id, an address) out of processed webhook bodies."""
    for text in bodies:
        erased.count("webhook bodies", conn.execute(
            query("erase_event_bodies_naming"), {"text": text}).fetchall())  # fmt: skip
        row = conn.execute(query("erase_waiting_events_naming"), {"text": text}).fetchone()
        erased.pending_events += int(row["n"]) if row else 0
    for text in texts:
        params = {"text": text, "pattern": re.escape(text)}
        for what, name in (("alerts", "erase_text_in_alerts"), ("errors", "erase_text_in_errors"),
                           ("queue items", "erase_text_in_queue")):  # fmt: skip
            erased.count(what, conn.execute(query(name), params).fetchall())


class WatchOpen(ValueError):
    """The deal is still followed up: its next reconciliation would write its name again."""


def erase_deal(conn: psycopg.Connection[Any], deal_id: str) -> Erased:
    """Erase what we keep of a deal (in the caller's transaction); ``WatchOpen`` while it has
    an open watch (the CRM's name would come back with the next reconciliation)."""
    params = {"deal": deal_id}
    if conn.execute(query("erase_open_watch"), params).fetchone() is not None:
        raise WatchOpen(
            f"deal {deal_id} is followed up: stop that first (`followup watches unwatch "
            f"{deal_id} --reason …`), or its next reconciliation reads its name from the CRM again"
        )
    erased = Erased()
    names = [str(r["name"]) for r in conn.execute(query("erase_deal_names"), params)]
    erased.count("watches", conn.execute(query("erase_deal_watches"), params).fetchall())
    erased.count("summaries", conn.execute(query("erase_deal_summaries"), params).fetchall())
    erased.count("review items", conn.execute(query("erase_deal_review_items"), params).fetchall())
    _texts(conn, erased, names, bodies=[deal_id])
    tasks = [str(r["ref"]) for r in conn.execute(query("erase_deal_vendor_objects"), params)]
    mails = [str(r["ref"]) for r in conn.execute(query("erase_deal_mails"), params)]
    erased.elsewhere += [f"ClickUp task {ref}: its name and text name the deal" for ref in tasks]
    erased.elsewhere += [f"mail {key} (sent; a copy in the sender's Sent Items)" for key in mails]
    erased.elsewhere.append(f"the CRM's deal {deal_id} itself (EspoCRM)")
    erased.elsewhere += KEPT_ELSEWHERE
    erased.elsewhere += KEPT_ELSEWHERE
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
    reviewed = conn.execute(
        query("erase_lead_review_items"), {"events": [str(e) for e in event_ids]}
    ).fetchall()
    erased.count("review items", reviewed)
    learners = conn.execute(query("erase_person_learners"), {"email": email}).fetchall()
    erased.count("learner assignments", learners)
    credentials = conn.execute(query("erase_person_certificates"), {"email": email}).fetchall()
    erased.count("certificates", credentials)
    names = [str(r["learner_name"]) for r in learners if r.get("learner_name")]
    _texts(conn, erased, [email, *names], bodies=[email])
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
    erased.elsewhere += KEPT_ELSEWHERE
    return erased
