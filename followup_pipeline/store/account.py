"""The rows the account of due actions reads (``domain/account.py``): steps, ledger actions,
events, reminders, certificates and publications of a window, each with the list's item that
waits for it. The ingress's ``/metrics`` runs the same queries (``ACCOUNT_QUERIES``) on its own
pool."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any, TypedDict

import psycopg

from followup_pipeline.domain.account import AccountRows, step_days
from followup_pipeline.store.queries import query

#: The account's queries, in the order of ``AccountRows``' fields.
ACCOUNT_QUERIES = (
    "account_steps",
    "account_actions",
    "account_events",
    "account_reminders",
    "account_certificates",
    "account_publications",
)


class Params(TypedDict):
    """The parameters of the account's queries."""

    since: datetime
    until: datetime
    first_day: date
    last_day: date


def params(since: datetime, until: datetime) -> Params:
    """The parameters every account query takes."""
    first_day, last_day = step_days(since, until)
    return {"since": since, "until": until, "first_day": first_day, "last_day": last_day}


def read(conn: psycopg.Connection[Any], since: datetime, until: datetime) -> AccountRows:
    """Every row the account of the window reads."""
    values = params(since, until)
    found = [list(conn.execute(query(name), values).fetchall()) for name in ACCOUNT_QUERIES]
    return AccountRows(*found)
