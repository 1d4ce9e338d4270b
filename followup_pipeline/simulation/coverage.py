"""The machine against the world: what the scenario did is found in the machine's records, so
that a machine that never opened a watch, or lost an acknowledged delivery, cannot pass on the
rows it did not write."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import psycopg
from psycopg.rows import dict_row

from followup_pipeline.sandbox.senders import PAYMENT, SITE_FORM
from followup_pipeline.simulation.evidence import verdict
from followup_pipeline.simulation.invariants import Invariant
from followup_pipeline.store.events import delivery_key

#: The stages the machine follows by default (``FOLLOWUP_WATCHED_STAGES``).
WATCHED = ("Proposal", "Negotiation")
#: How a watch of a deal still in a watched stage may have ended on purpose.
ENDED_ON_PURPOSE = ("exhausted", "unwatched")

WATCHES = """
SELECT subject_id, count(*) FILTER (WHERE closed_at IS NULL) AS open,
       (array_agg(closed_reason ORDER BY id DESC))[1] AS last_reason
FROM followup.watches WHERE subject_id = ANY(%(ids)s::text[]) GROUP BY subject_id
"""
EVENTS = """
SELECT source, delivery_id FROM followup.events
WHERE source = ANY(%(sources)s::text[]) AND delivery_id IS NOT NULL
"""


def deals_followed(conn: psycopg.Connection[Any], deals: Iterable[tuple[str, str]]) -> Invariant:
    """Every deal the world left open in a watched stage has one open watch, or one that ended
    on purpose (its steps exhausted, or unwatched by an operator); no deal has two open."""
    stages = dict(deals)
    followed = [deal for deal, stage in stages.items() if stage in WATCHED]
    with conn.cursor(row_factory=dict_row) as cur:
        found = {row["subject_id"]: row for row in cur.execute(WATCHES, {"ids": list(stages)})}
    broken = [f"deal {deal}: {row['open']} open watches" for deal, row in found.items()
              if row["open"] > 1]  # fmt: skip
    for deal in followed:
        row = found.get(deal)
        if row is None:
            broken.append(f"deal {deal} ({stages[deal]}): never watched")
        elif row["open"] == 0 and row["last_reason"] not in ENDED_ON_PURPOSE:
            broken.append(f"deal {deal} ({stages[deal]}): watch closed as {row['last_reason']}")
    return verdict("open deals followed", len(followed), broken)


def deliveries_stored(
    conn: psycopg.Connection[Any], control: Callable[[str, str], Any]
) -> Invariant:
    """Every site form and payment the senders saw acknowledged (a 2xx) is one stored event."""
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(EVENTS, {"sources": [SITE_FORM, PAYMENT]}).fetchall()
    stored = {(row["source"], row["delivery_id"]) for row in rows}
    checked, broken = 0, []
    for source, path in ((SITE_FORM, "/forms"), (PAYMENT, "/payments")):
        for message in control("GET", path)["messages"]:
            if message["outcome"] != "delivered":
                continue
            checked += 1
            if (source, delivery_key(str(message["id"]))) not in stored:
                broken.append(f"{source} {message['id']}: acknowledged, not stored")
    return verdict("acknowledged deliveries stored", checked, broken)
