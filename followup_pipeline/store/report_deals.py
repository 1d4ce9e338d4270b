"""What the Friday overview names of the week's deals (``domain/report_deals.py``), read from
the watches' copies of the CRM's names and amounts: the list reads without the CRM."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg

from followup_pipeline.domain.report_deals import DealLine, OwnerValue, QuietDeal, WeekDeals
from followup_pipeline.store.db import fetch_all
from followup_pipeline.store.queries import query

#: How many deals longest without contact the overview names.
QUIET_SHOWN = 5


def week_deals(conn: psycopg.Connection[Any], *, start: datetime, until: datetime) -> WeekDeals:
    """The deals of [start, until) by name."""
    window = {"start": start, "until": until}
    closed = fetch_all(conn, DealLine, query("week_deals_closed"), window)
    return WeekDeals(
        won=[d for d in closed if d.what == "won"],
        lost=[d for d in closed if d.what == "lost"],
        entered=fetch_all(conn, DealLine, query("week_deals_entered"), window),
        left=[d for d in closed if d.what not in ("won", "lost")],
        value_by_owner=fetch_all(conn, OwnerValue, query("week_value_by_owner"), window),
        quiet=fetch_all(
            conn, QuietDeal, query("week_quiet_deals"), {"until": until, "limit": QUIET_SHOWN}
        ),
    )
