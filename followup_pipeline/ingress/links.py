"""The signed links of the mails (``domain/links.py``), served by the ingress.

``GET /links/{purpose}/{token}`` shows a page that asks, and changes nothing (mail scanners and
link previews fetch links). ``POST`` to the same address (the page's button, or a mail client's
RFC 8058 one-click ``List-Unsubscribe=One-Click``) is verified, stored as an event (source
``link``) and committed, like a webhook, then applied: the change, the link's use and its audit
entry in one transaction (``store/links.py``). A click whose apply did not end stays stored and
is applied by the next learning run.

Answers: 200 done (an opt-out clicked again: done already); 403 a token no key of ours signed
(forged, altered, or its key retired: nothing stored); 404 no such link; 409 a single-use link
used before, or a version superseded; 410 expired; 503 when the database cannot store it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from followup_pipeline.domain import links as signed
from followup_pipeline.domain.academy_mail import render_link_page
from followup_pipeline.domain.academy_words import WORDS, language_of
from followup_pipeline.ingress.metrics import Metrics
from followup_pipeline.settings import Settings
from followup_pipeline.store import events, links
from followup_pipeline.store.db import StoreError, connect, typed_row
from followup_pipeline.store.queries import query

log = logging.getLogger(__name__)

#: The most a click's form may hold (RFC 8058's is 26 bytes).
MAX_FORM = 2048
#: What each outcome answers.
STATUS: dict[links.Outcome, int] = {
    "done": 200,
    "already": 409,
    "expired": 410,
    "superseded": 409,
    "unknown": 404,
}


def _page(language: str, message: str, status: int) -> HTMLResponse:
    lang = language_of(language)
    return HTMLResponse(render_link_page(language=lang, message=message), status)


class LinkPages:
    """The link routes of one ingress process."""

    def __init__(
        self,
        settings: Settings,
        database_url: str,
        pool: AsyncConnectionPool[Any],
        now: Callable[[], float],
        metrics: Metrics,
    ) -> None:
        self.keys = links.link_keys(settings)
        self.database_url = database_url
        self.pool = pool
        self.now = now
        self.metrics = metrics

    def _verified(self, request: Request) -> tuple[signed.Purpose, str] | None:
        purpose = signed.purpose_of(request.path_params["purpose"])
        if purpose is None:
            return None
        id_ = signed.verify(self.keys, purpose, request.path_params["token"])
        return None if id_ is None else (purpose, id_)

    async def _find(self, id_: str) -> links.Link | None:
        async with (
            self.pool.connection() as conn,
            conn.cursor(row_factory=typed_row(links.Link)) as cursor,
        ):
            await cursor.execute(query("links_find"), {"id": id_})
            found: links.Link | None = await cursor.fetchone()
            return found

    def _words(self, link: links.Link) -> tuple[str, dict[str, str]]:
        language = language_of(link.learner_lang, link.language)
        return language, WORDS[language]

    async def show(self, request: Request) -> Response:
        """``GET``: what the link would do, and a button that posts; nothing changes."""
        verified = self._verified(request)
        if verified is None:
            self.metrics.count_rejected("bad_link")
            return _page("en", WORDS["en"]["page_unknown"], 403)
        purpose, id_ = verified
        try:
            link = await self._find(id_)
        except (psycopg.Error, PoolTimeout, StoreError):
            return _page("en", WORDS["en"]["page_busy"], 503)
        if link is None:
            return _page("en", WORDS["en"]["page_unknown"], 404)
        language, w = self._words(link)
        now = datetime.fromtimestamp(self.now(), UTC)
        if now >= link.expires_at:
            return _page(language, w["page_expired"], 410)
        if signed.SINGLE_USE[purpose] and link.uses > 0:
            return _page(language, w["page_already"], 409)
        values = {"academy": link.tenant_name, "title": link.title or "", "version": link.version}
        ask = w[f"page_{purpose}_ask"].format(**values)
        page = render_link_page(
            language=language_of(language),
            message="",
            ask=ask,
            button=w[f"page_{purpose}_button"],
            action=request.url.path,
        )
        return HTMLResponse(page)

    async def click(self, request: Request) -> Response:
        """``POST``: verified, stored and committed, then applied."""
        verified = self._verified(request)
        if verified is None:
            self.metrics.count_rejected("bad_link")
            return _page("en", WORDS["en"]["page_unknown"], 403)
        purpose, id_ = verified
        form = b""
        async for chunk in request.stream():
            form += chunk
            if len(form) > MAX_FORM:
                return _page("en", WORDS["en"]["page_unknown"], 413)
        params = events.delivery_params(
            source=links.SOURCE,
            event_type=purpose,
            body=links.click_body(id_, purpose, form),
            headers={k: request.headers[k] for k in ("content-type",) if k in request.headers},
            received_at=datetime.fromtimestamp(self.now(), UTC),
        )
        try:
            async with (
                self.pool.connection() as conn,
                conn.cursor(row_factory=typed_row(events.Stored)) as cursor,
            ):
                await cursor.execute(query("events_store"), params)
                stored: events.Stored | None = await cursor.fetchone()
            assert stored is not None  # the function answers one row, always
            used = await asyncio.to_thread(self._use, id_, stored.event_id)
        except (psycopg.Error, PoolTimeout, StoreError) as error:
            log.warning("a %s link could not be applied: %s", purpose, type(error).__name__)
            return _page("en", WORDS["en"]["page_busy"], 503)
        self.metrics.count_received(links.SOURCE)
        return self._answer(purpose, used)

    def _use(self, id_: str, event_id: int) -> links.Used:
        at = datetime.fromtimestamp(self.now(), UTC)
        with connect(self.database_url, autocommit=True) as conn:
            return links.use(conn, id_, at=at, event_id=event_id)

    def _answer(self, purpose: signed.Purpose, used: links.Used) -> Response:
        link = used.link
        if link is None:
            return _page("en", WORDS["en"]["page_unknown"], 404)
        language, w = self._words(link)
        values = {"academy": link.tenant_name, "title": link.title or "", "version": link.version}
        if used.outcome == "done" or (used.outcome == "already" and purpose == "opt_out"):
            # An opt-out clicked again is what the learner asked for: done, as before.
            return _page(language, w[f"page_{purpose}_done"].format(**values), 200)
        return _page(language, w[f"page_{used.outcome}"], STATUS[used.outcome])
