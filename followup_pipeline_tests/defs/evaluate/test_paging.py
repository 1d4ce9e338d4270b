"""Reconciliation while deals move during its scan: no deal is lost or wrongly closed."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import httpx
import psycopg

from followup_pipeline.defs.evaluate.reconcile import Reconciler
from followup_pipeline.defs.evaluate.tasks import TaskLedger
from followup_pipeline.domain.calendar import BusinessCalendar
from followup_pipeline.engine.scope import RunScope, Tally
from followup_pipeline.integrations.clickup import ClickUpClient
from followup_pipeline.integrations.espocrm import PAGE_SIZE, EspoCrmClient
from followup_pipeline.resources import PostgresResource

from .conftest import MONDAY, SANDBOX, Machine


class MovesBetweenPages(httpx.HTTPTransport):
    """The real HTTP to the sandbox; once the first page of deals has been answered, ``move``
    runs, as another CRM user would while the scan goes on."""

    def __init__(self, move: Callable[[], None]) -> None:
        super().__init__()
        self.move = move
        self.pages: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if request.url.path.endswith("/Opportunity"):
            self.pages.append(request.url.params.get("where[1][value]", "first"))
            if len(self.pages) == 1:
                self.move()
        return response


def _reconcile(machine: Machine, transport: httpx.BaseTransport, hours: int) -> Tally:
    """One reconciliation (evaluate's first op, without the hour's other work) at MONDAY+hours,
    its CRM requests through ``transport``."""
    crm = EspoCrmClient(
        f"{machine.sandbox}/espocrm",
        SANDBOX.espocrm_api_key.get_secret_value(),
        transport=transport,
    )
    board = ClickUpClient(
        f"{machine.sandbox}/clickup/api",
        SANDBOX.clickup_token.get_secret_value(),
        SANDBOX.clickup_list_id,
    )
    settings = machine.loaded_settings()
    postgres = PostgresResource(url=machine.db_url)
    now = MONDAY + timedelta(hours=hours)
    log = logging.getLogger("test")
    run = RunScope(now, None, log)
    tasks = TaskLedger(run, postgres, board, settings)
    calendar = BusinessCalendar("DE")
    try:
        return Reconciler(run, postgres, crm, tasks, settings, calendar=calendar).run()
    finally:
        crm.close()
        board.close()


def _open(db: psycopg.Connection[Any]) -> int:
    row = db.execute("SELECT count(*) AS n FROM watches WHERE closed_at IS NULL").fetchone()
    assert row is not None
    return int(row["n"])


def test_paging_a_deal_leaving_mid_scan_loses_and_wrongly_closes_nothing(
    machine: Machine, db: psycopg.Connection[Any]
) -> None:
    count = PAGE_SIZE + 30
    deals = [machine.deal(name=f"Deal {n}") for n in range(count)]
    assert _reconcile(machine, httpx.HTTPTransport(), 0).counts["registered"] == count
    by_id = sorted(deals)
    leaving = by_id[5]  # on the first page: by offset, its leaving would shift page two
    moving = MovesBetweenPages(lambda: machine.move(leaving, "Closed Lost"))
    tally = _reconcile(machine, moving, 1)
    # Keyset pages: the second starts after the first page's last id, whatever left meanwhile.
    assert moving.pages == ["first", by_id[PAGE_SIZE - 1]]
    assert tally.counts["crm_deals_watched_stages"] == count  # no deal hidden by the shift
    assert _open(db) == count  # nothing closed: the deal that left was listed before it left
    _reconcile(machine, httpx.HTTPTransport(), 2)  # the next run sees the deal that left
    assert machine.watch(leaving)["closed_reason"] == "lost"
    assert _open(db) == count - 1
