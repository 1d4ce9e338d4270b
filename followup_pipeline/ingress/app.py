"""The webhook ingress: verify, store, commit, and only then answer 200 (docs/architecture.md §3).

It holds no business logic. The signed links of the mails are served beside the webhooks, stored
the same way before they are applied (``links.py``).

Sources: EspoCRM (``/webhooks/espocrm``), and under ``/webhooks/{source}`` those of
``FOLLOWUP_STANDARD_WEBHOOKS`` (Standard Webhooks) and of ``FOLLOWUP_STRIPE_WEBHOOKS`` (signed as
Stripe signs). Answers to a webhook: 200 stored (or a counted duplicate); 400 signed but
unparseable (kept as a dead letter); 401 bad or missing signature, stale timestamp, unknown
webhook or source (nothing stored); 413 body over the limit; 503 when the database cannot store
it (EspoCRM retries 503, not 502/504); 500 when the database refused the row (``store_failed``)
or the handling failed (``internal_error``, logged with its traceback). Every answer to a webhook
but 200 carries ``{"error", "detail"}``.
"""

import contextlib
import ctypes
import logging
import os
import re
import signal
import time
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from followup_pipeline.ingress.asgi import (
    Disconnected,
    answer,
    headers_of,
    read_body,
    webhook_source,
)
from followup_pipeline.ingress.batcher import GroupCommit, once_more
from followup_pipeline.ingress.deliveries import parse_delivery
from followup_pipeline.ingress.links import LinkPages
from followup_pipeline.ingress.metrics import Metrics
from followup_pipeline.ingress.readings import Readings
from followup_pipeline.ingress.signatures import (
    Rejected,
    Verified,
    verify_espocrm,
    verify_standard,
    verify_stripe,
)
from followup_pipeline.settings import Settings
from followup_pipeline.store import events
from followup_pipeline.store.db import StoreError, StoreUnavailable, build_async_pool, typed_row
from followup_pipeline.store.queries import query

log = logging.getLogger(__name__)

#: How long a request waits for a database connection before answering 503 (EspoCRM gives 10 s).
DB_TIMEOUT_S = 3.0
#: How long the ingress's pool retries a lost connection in the background before it leaves the
#: reconnecting to the next request.
RECONNECT_TIMEOUT_S = 0.5
#: Connections of one ingress process: a store holds one for a single round trip.
POOL_SIZE = 8
SOURCE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
#: Request headers kept with an event (signatures are kept: they prove origin, reveal no secret).
KEPT_HEADERS = (
    "content-type",
    "user-agent",
    "signature",
    "x-signature",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "stripe-signature",
)


#: What a webhook's handling reads of its request's headers.
READ_HEADERS = frozenset((*KEPT_HEADERS, "content-length"))


class Ingress:
    """The app's state: settings, the pool, the counters."""

    def __init__(
        self,
        settings: Settings,
        pool: AsyncConnectionPool[Any],
        now: Callable[[], float],
        metrics: Metrics | None = None,
    ) -> None:
        self.settings = settings
        self.pool = pool
        self.now = now
        self.metrics = metrics or Metrics()
        self.readings = Readings(settings, pool, now)
        #: Group commit (``batcher.py``), started with the app; None: each delivery on its own.
        self.batcher: GroupCommit | None = None
        if settings.ingress_batch_window_ms > 0:
            self.batcher = GroupCommit(
                pool,
                self._store_one,
                window_s=settings.ingress_batch_window_ms / 1000,
                max_rows=settings.ingress_batch_rows,
            )

    async def _store(self, params: dict[str, object]) -> events.Stored:
        """Store one delivery: with those that arrive with it (group commit), or on its own."""
        if self.batcher is not None:
            return await self.batcher.store(params)
        return await self._store_one(params)

    async def _store_one(self, params: dict[str, object]) -> events.Stored:
        """One round trip: the database's ``store_delivery``, in autocommit its own transaction,
        whose answer comes only with its commit (store, then acknowledge); tried once more on a
        fresh connection when the first was lost (``once_more``)."""

        async def store(conn: psycopg.AsyncConnection[Any]) -> events.Stored:
            async with conn.cursor(row_factory=typed_row(events.Stored)) as cursor:
                await cursor.execute(query("events_store"), params)
                stored = await cursor.fetchone()
            assert stored is not None  # the function answers one row, always
            return stored

        return await once_more(self.pool, store)

    async def _ping(self) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(query("database_ping"))

    def verify(self, source: str, headers: Mapping[str, str], body: bytes) -> Verified:
        """Who signed the delivery; ``Rejected`` when nobody we trust did."""
        if source == "espocrm":
            return verify_espocrm(
                headers,
                body,
                self.settings.espocrm_webhooks,
                accept_legacy=self.settings.espocrm_legacy_signature,
            )
        if source in self.settings.stripe_webhooks:
            secrets = [s.get_secret_value() for s in self.settings.stripe_webhooks[source]]
            return verify_stripe(headers, body, secrets, now=self.now())
        secrets = [s.get_secret_value() for s in self.settings.standard_webhooks[source]]
        return verify_standard(headers, body, secrets, now=self.now())

    async def receive(
        self, scope: Scope, receive: Receive, source: str
    ) -> tuple[int, dict[str, Any]]:
        """Verify, store and commit one delivery; then its answer (status, JSON)."""
        stripe = source in self.settings.stripe_webhooks
        if source != "espocrm" and source not in self.settings.standard_webhooks and not stripe:
            raise Rejected("unknown_source", "no webhook source of that name is configured")
        read = headers_of(scope, READ_HEADERS)
        declared = read.pop("content-length", None)
        body = await read_body(receive, declared, self.settings.ingress_max_body_bytes)
        verified = self.verify(source, read, body)
        parsed = parse_delivery(source, verified.event_type, body, stripe=stripe)
        headers = read  # (only those kept: KEPT_HEADERS)
        params = events.delivery_params(
            source=source,
            event_type=parsed.event_type,
            body=body,
            headers=headers,
            status=parsed.status,
            error=parsed.error,
            # Standard Webhooks: the signed webhook-id; Stripe: the event id in the body.
            delivery_id=verified.delivery_id or parsed.delivery_id,
            # The machine's clock, the one its jobs decide by (a simulation's, when simulated).
            received_at=datetime.fromtimestamp(self.now(), UTC),
        )
        try:
            stored = await self._store(params)
        except (psycopg.OperationalError, StoreUnavailable) as error:
            log.warning("cannot store a %s delivery: %s", source, type(error).__name__)
            raise Rejected("database_unavailable", "the event could not be stored", 503) from None
        except (psycopg.Error, StoreError) as error:
            # Not the database's absence: a 500, which EspoCRM retries too, counted as such.
            log.error("storing a %s delivery failed: %s", source, type(error).__name__)
            raise Rejected("store_failed", "the event could not be stored", 500) from None
        name = f"event:{stored.event_id}"
        if stored.duplicate:
            self.metrics.count_duplicate(source)
        elif parsed.error is None:
            self.metrics.count_received(source)
        if parsed.error is not None:
            self.metrics.count_rejected("unparseable")
            return 400, {"error": "unparseable", "detail": parsed.error, "event": name}
        return 200, {"event": name, "duplicate": stored.duplicate}

    async def webhook(self, scope: Scope, receive: Receive, send: Send, source: str) -> None:
        """``POST /webhooks/espocrm`` and ``POST /webhooks/{source}``, in plain ASGI
        (``asgi.py``)."""
        started = time.perf_counter()
        try:
            try:
                if not SOURCE_NAME.match(source):
                    raise Rejected("unknown_source", "no webhook source of that name is configured")
                status, content = await self.receive(scope, receive, source)
            except Rejected as rejected:
                self.metrics.count_rejected(rejected.reason)
                log.info("refused a %s delivery: %s", source[:64], rejected.reason)
                status = rejected.status
                content = {"error": rejected.reason, "detail": rejected.detail}
            except Disconnected:
                return  # nobody to answer, and nothing of it stored
            except Exception:
                log.exception("a %s delivery failed", source[:64])
                self.metrics.count_rejected("internal_error")
                status = 500
                content = {"error": "internal_error", "detail": "the delivery was not handled"}
            await answer(send, status, content)
        finally:
            self.metrics.observe(time.perf_counter() - started)

    async def healthz(self, request: Request) -> Response:
        """``GET /healthz``: 200 when the database answers, else 503."""
        try:
            await self._ping()
        except (psycopg.Error, StoreError):
            return JSONResponse({"status": "unavailable", "database": "unreachable"}, 503)
        return JSONResponse({"status": "ok", "database": "ok"})

    async def prometheus(self, request: Request) -> Response:
        """``GET /metrics``: the counters, the histogram and the event log's gauges."""
        try:
            gauges: dict[str, float] | None = await self.readings.gauges()
        except (psycopg.Error, StoreError):
            gauges = None
        text = self.metrics.render(gauges)
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")


def create_app(
    settings: Settings,
    database_url: str,
    *,
    db_timeout_s: float = DB_TIMEOUT_S,
    now: Callable[[], float] = time.time,
    pool_size: int | None = None,
    metrics: Metrics | None = None,
) -> Starlette:
    """The ingress app; its pool opens with the app (without waiting for the database)."""
    # A short background reconnection: once it gives up, each request that needs a connection
    # makes one itself, so a database that is back is noticed by the next delivery, not after
    # the pool's doubling backoff (up to 14 s seen); a healthy pool costs no extra round trip.
    pool = build_async_pool(
        database_url,
        max_size=pool_size or settings.ingress_pool_size or POOL_SIZE,
        name="ingress",
        timeout=db_timeout_s,
        reconnect_timeout=RECONNECT_TIMEOUT_S,
        # Never wait long on a lock or a statement: EspoCRM gives up after 10 s. Set once per
        # connection, not per transaction.
        options="-c lock_timeout=2s -c statement_timeout=5s",
    )
    ingress = Ingress(settings, pool, now, metrics)
    pages = LinkPages(settings, database_url, pool, now, ingress.metrics)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # wait=False: the ingress starts (and answers 503) while the database is down.
        await pool.open(wait=False)
        if ingress.batcher is not None:
            ingress.batcher.start()
        try:
            yield
        finally:
            if ingress.batcher is not None:
                await ingress.batcher.stop()
            await pool.close()

    routes = [
        # (IngressApp answers a POST to /webhooks/… before the routes; these answer the rest:
        # 405, and a POST the shortcut did not recognise)
        Route("/webhooks/espocrm", WebhookRoute(ingress), methods=["POST"]),
        Route("/webhooks/{source}", WebhookRoute(ingress), methods=["POST"]),
        Route("/links/{purpose}/{token}", pages.show, methods=["GET"]),
        Route("/links/{purpose}/{token}", pages.click, methods=["POST"]),
        Route("/healthz", ingress.healthz, methods=["GET"]),
        Route("/metrics", ingress.prometheus, methods=["GET"]),
    ]
    app = IngressApp(ingress, routes=routes, lifespan=lifespan)
    app.state.ingress = ingress
    return app


class WebhookRoute:
    """The webhook routes as plain ASGI endpoints (Starlette calls an object as an ASGI app)."""

    def __init__(self, ingress: Ingress) -> None:
        self.ingress = ingress

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        source = scope.get("path_params", {}).get("source", "espocrm")
        await self.ingress.webhook(scope, receive, send, source)


class IngressApp(Starlette):
    """The ingress's app: a webhook POST answered in plain ASGI (its hot path, ``asgi.py``),
    everything else by Starlette's routes."""

    def __init__(self, ingress: Ingress, **options: Any) -> None:
        super().__init__(**options)
        self.ingress = ingress

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        source = webhook_source(scope)
        if source is None:
            await super().__call__(scope, receive, send)
            return
        await self.ingress.webhook(scope, receive, send, source)


def _die_with_parent() -> None:
    """A worker ends with its parent, even a killed one (Linux ``PR_SET_PDEATHSIG``): a worker
    left alone would hold the port and answer with nobody holding the database."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return  # not Linux: the supervisor's own checks remain
    if os.getppid() == 1:  # the parent died before the call
        os.kill(os.getpid(), signal.SIGTERM)


def app_from_environment() -> Starlette:
    """The app of one worker of ``followup ingress --workers N``: the settings and the database
    URL from the environment its parent set (the parent holds the embedded cluster)."""
    from followup_pipeline.settings import load_settings

    # A spawned worker has no logging set up (the command's basicConfig ran in its parent):
    # refusals and errors are logged as the command logs them.
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    _die_with_parent()
    settings = load_settings()
    url = settings.database_url
    if url is None:
        raise RuntimeError("FOLLOWUP_DATABASE_URL is not set: start workers through the command")
    return create_app(settings, url.get_secret_value())
