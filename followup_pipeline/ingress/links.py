"""The signed links of the mails (``domain/links.py``), served by the ingress.

``GET /links/{purpose}/{token}`` shows a page that asks, and changes nothing (mail scanners and
link previews fetch links). ``POST`` to the same address (the page's button, or a mail client's
RFC 8058 one-click ``List-Unsubscribe=One-Click``) is verified, stored as an event (source
``link``) and committed, like a webhook, then applied: the change, the link's use and its audit
entry in one transaction (``store/links.py``). A click whose apply did not end stays stored and
is applied by the next learning run.

Nothing is stored for a link that cannot be used (unknown, expired, spent); an approval or an
acknowledgement takes the page's button (``confirm=1``), never a bare POST. The same click again
within the dedup window is a duplicate, applied once.

Answers (HTML pages, in the reader's language): 200 done (an opt-out clicked again: done
already); 400 an approval posted without the button (the page asks); 403 a token no key of ours
signed (forged, altered, or its key retired: nothing stored); 404 no such link; 409 a single-use
link used before, or a version superseded; 410 expired; 413 a body over 2 KiB; 503 when the
database cannot store or apply it, or the keys cannot be read.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from followup_pipeline.domain import links as signed
from followup_pipeline.domain.academy_mail import render_link_page
from followup_pipeline.domain.academy_words import WORDS, Language, language_of
from followup_pipeline.ingress.metrics import Metrics
from followup_pipeline.settings import Settings
from followup_pipeline.store import events, links
from followup_pipeline.store.db import StoreError, connect, connection_kwargs, typed_row
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


def _page(language: Language, message: str, status: int) -> HTMLResponse:
    return HTMLResponse(render_link_page(language=language, message=message), status)


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
        self.settings = settings
        self.database_url = database_url
        self.pool = pool
        self.now = now
        self.metrics = metrics
        self._keys: list[signed.LinkKey] | None = None

    def keys(self) -> list[signed.LinkKey]:
        """The keys, read at the first link (a key trouble answers the links 503, never stops
        the webhooks)."""
        if self._keys is None:
            self._keys = links.link_keys(self.settings)
        return self._keys

    def _verified(self, request: Request) -> tuple[signed.Purpose, str] | None:
        purpose = signed.purpose_of(request.path_params["purpose"])
        if purpose is None:
            return None
        id_ = signed.verify(self.keys(), purpose, request.path_params["token"])
        return None if id_ is None else (purpose, id_)

    async def _find(self, id_: str) -> links.Link | None:
        async with (
            self.pool.connection() as conn,
            conn.cursor(row_factory=typed_row(links.Link)) as cursor,
        ):
            await cursor.execute(query("links_find"), {"id": id_})
            found: links.Link | None = await cursor.fetchone()
            return found

    def _words(self, link: links.Link) -> tuple[Language, dict[str, str]]:
        language = language_of(link.learner_lang, link.language)
        return language, WORDS[language]

    def _refusal(self, purpose: signed.Purpose, link: links.Link | None) -> Response | None:
        """Why the link cannot be used now (a page and its status), or None: it can."""
        if link is None:
            return _page("en", WORDS["en"]["page_unknown"], 404)
        language, w = self._words(link)
        if datetime.fromtimestamp(self.now(), UTC) >= link.expires_at:
            return _page(language, w["page_expired"], 410)
        if signed.SINGLE_USE[purpose] and link.uses > 0:
            return _page(language, w["page_already"], 409)
        return None

    def _ask(self, request: Request, purpose: signed.Purpose, link: links.Link) -> str:
        language, w = self._words(link)
        values = {"academy": link.tenant_name, "title": link.title or "", "version": link.version}
        return render_link_page(
            language=language,
            message="",
            ask=w[f"page_{purpose}_ask"].format(**values),
            button=w[f"page_{purpose}_button"],
            action=request.url.path,
        )

    async def show(self, request: Request) -> Response:
        """``GET``: what the link would do, and a button that posts; nothing changes."""
        started = time.perf_counter()
        try:
            verified = self._verified(request)
            if verified is None:
                self.metrics.count_rejected("bad_link")
                return _page("en", WORDS["en"]["page_unknown"], 403)
            purpose, id_ = verified
            link = await self._find(id_)
            refused = self._refusal(purpose, link)
            if refused is not None or link is None:
                return refused or _page("en", WORDS["en"]["page_unknown"], 404)
            return HTMLResponse(self._ask(request, purpose, link))
        except (psycopg.Error, PoolTimeout, StoreError, OSError, ValueError) as error:
            log.warning("a link page could not be shown: %s", type(error).__name__)
            return _page("en", WORDS["en"]["page_busy"], 503)
        finally:
            self.metrics.observe(time.perf_counter() - started)

    async def click(self, request: Request) -> Response:
        """``POST``: verified, checked, stored and committed, then applied."""
        started = time.perf_counter()
        try:
            return await self._click(request)
        except (psycopg.Error, PoolTimeout, StoreError, OSError, ValueError) as error:
            log.warning("a link could not be applied: %s", type(error).__name__)
            return _page("en", WORDS["en"]["page_busy"], 503)
        finally:
            self.metrics.observe(time.perf_counter() - started)

    async def _click(self, request: Request) -> Response:
        verified = self._verified(request)
        if verified is None:
            self.metrics.count_rejected("bad_link")
            return _page("en", WORDS["en"]["page_unknown"], 403)
        purpose, id_ = verified
        form = b""
        async for chunk in request.stream():
            form += chunk
            if len(form) > MAX_FORM:
                self.metrics.count_rejected("too_large")
                return _page("en", WORDS["en"]["page_too_large"], 413)
        # Nothing is stored for a link that cannot be used: no flood of refusals (counted, in
        # /metrics, by their status).
        link = await self._find(id_)
        refused = self._refusal(purpose, link)
        if refused is not None or link is None:
            self.metrics.count_rejected(f"link_{refused.status_code if refused else 404}")
            return refused or _page("en", WORDS["en"]["page_unknown"], 404)
        if purpose != "opt_out" and b"confirm=1" not in form:
            # An approval or an acknowledgement is the page's button, never a bare POST.
            return HTMLResponse(self._ask(request, purpose, link), 400)
        params = events.delivery_params(
            source=links.SOURCE,
            event_type=purpose,
            body=links.click_body(id_, purpose),
            headers={k: request.headers[k] for k in ("content-type",) if k in request.headers},
            received_at=datetime.fromtimestamp(self.now(), UTC),
        )
        async with (
            self.pool.connection() as conn,
            conn.cursor(row_factory=typed_row(events.Stored)) as cursor,
        ):
            await cursor.execute(query("events_store"), params)
            stored: events.Stored | None = await cursor.fetchone()
        assert stored is not None  # the function answers one row, always
        if stored.duplicate:
            self.metrics.count_duplicate(links.SOURCE)
        else:
            self.metrics.count_received(links.SOURCE)
        if stored.duplicate and stored.status == "done":
            # The same click again within the hour: applied before, nothing to do twice.
            return self._answer(purpose, links.Used("already", link))
        used = await asyncio.to_thread(self._use, id_, stored.event_id)
        return self._answer(purpose, used)

    def _use(self, id_: str, event_id: int) -> links.Used:
        at = datetime.fromtimestamp(self.now(), UTC)
        # The ingress's own limits beside every connection's options: a click waits on no lock
        # for long.
        options = f"{connection_kwargs()['options']} -c lock_timeout=2s -c statement_timeout=5s"
        with connect(self.database_url, autocommit=True, options=options) as conn:
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
