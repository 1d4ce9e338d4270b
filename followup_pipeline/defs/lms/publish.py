"""Content publishing (docs/architecture.md §10): a version of a piece of content whose time came
is published (its course module in Moodle made visible) only when it meets every prerequisite:
approved, and the current version of its content. An outdated version is never put out; content
not approved waits, says why, and goes to the catch-up queue with the tenant's owner.

Each version due goes the engine's one way out (``engine/effects.py``; the vendor part,
``module_publication.py``) under a lock on its content, which ``followup lms content add`` and
``approve`` take too, so that nothing is added or approved between the re-check and Moodle's
answer: what an earlier run left is settled first (a lost answer by Moodle showing the module,
never by a blind second request); then the version is read again, and a superseded one is
suppressed, one not approved is queued, and an approved current one is published in the
tenant's mode (``dry``: held, with why) and read back: ``confirmed``. One published and not read
back yet is asked again at every run, and queued with the owner after ``RECONFIRM``.
"""

from collections import Counter
from datetime import timedelta

from followup_pipeline.defs.lms.catch_up import CatchUp
from followup_pipeline.defs.lms.module_publication import VISIBLE, ContentBook, ModulePublication
from followup_pipeline.defs.lms.outbound import confirm, tenant_mode
from followup_pipeline.defs.lms.ports import CourseSite
from followup_pipeline.engine.effects import ActionSpec, Outbound, Sent
from followup_pipeline.engine.ledger import ActionLedger
from followup_pipeline.engine.mailer import LockableDatabase
from followup_pipeline.engine.scope import RunScope
from followup_pipeline.integrations.errors import IntegrationError
from followup_pipeline.settings import Settings
from followup_pipeline.store import lms_content
from followup_pipeline.store.lms import Tenant
from followup_pipeline.store.lms_content import ContentRow, content_lock
from followup_pipeline.store.run_lock import RunLock

#: How long a publication not read back yet waits before it is queued with the owner (it is
#: asked about again at every run).
RECONFIRM = timedelta(days=2)
#: The states in which a version may still be published.
OPEN = ("waiting", "attempted", "failed", "unknown")


class TenantContent:
    """One run's publications of one tenant."""

    def __init__(
        self,
        run: RunScope,
        db: LockableDatabase,
        tenant: Tenant,
        site: CourseSite,
        settings: Settings,
    ) -> None:
        self.run = run
        self.db = db
        self.tenant = tenant
        self.site = site
        self.ledger = ActionLedger.of(db, run, settings)
        self.outbound = Outbound(self.ledger)
        self.queue = CatchUp(db, tenant, settings, run.now)
        self.counts: Counter[str] = Counter()
        self.book = ContentBook(db, tenant, run.now, self.counts)

    def run_due(self) -> Counter[str]:
        """Publish, hold or leave every version due now; the counts."""
        with self.db.connection() as conn:
            due = lms_content.rows(conn, self.tenant.id, due=self.run.now)
        for row in due:
            lock = RunLock.try_take(
                self.db.url,
                content_lock(row.tenant_id, row.content_id),
                owner=self.run.run_id or "lms",
            )
            try:
                if not lock.held:
                    self.counts["in_flight"] += 1
                    continue
                self.one(row)
            except IntegrationError as error:
                self.counts["left_for_next_run"] += 1
                self.run.log.warning("%s: left for the next run: %s", row.idempotency_key, error)
            finally:
                lock.release()
        return self.counts

    def spec(self, row: ContentRow) -> ActionSpec:
        """The ledger action of a version's publication."""
        return ActionSpec(
            key=row.idempotency_key,
            kind="publication",
            due_at=row.publish_at,
            time_zone=self.tenant.time_zone,
            payload={
                "tenant": row.tenant_id,
                "content": row.content_id,
                "version": row.version,
                "cmid": row.cmid,
                "approved_by": row.approved_by,
            },
        )

    def one(self, row: ContentRow) -> None:
        """Settle what an earlier run left, then re-check, then publish once."""
        if row.state == "published":
            self.published_not_confirmed(row)
            return
        publication = ModulePublication(row, self.site, self.book)
        sent = self.outbound.settle(self.spec(row), publication)
        if sent is None:
            sent = self.rechecked(row)
        if sent is not None:
            self.ended(row, publication, sent)

    def rechecked(self, row: ContentRow) -> Sent | None:
        """The version read again: suppressed when superseded, queued when not approved, else
        published in the tenant's mode; None when it is not to be published now."""
        with self.db.connection() as conn, conn.transaction():
            now = lms_content.lock(conn, row.tenant_id, row.content_id, row.version)
        if now is None or now.state not in OPEN:
            return None  # settled meanwhile
        spec, publication = self.spec(now), ModulePublication(now, self.site, self.book)
        if not now.current:
            return self.outbound.suppress(spec, publication, "superseded")
        if now.approved_by is None:
            why = f"not approved (version {now.version}; due {now.publish_at:%Y-%m-%d %H:%M})"
            self.book.mark(now, now.state, reason=why)
            self.counts["waiting_approval"] += 1
            command = f"followup lms content approve {now.tenant_id} {now.content_id} {now.version}"
            self.park(now, f"due and not approved: approve it with `{command} --by NAME`")
            return None
        return self.outbound.send(spec, publication, mode=tenant_mode(self.tenant))

    def ended(self, row: ContentRow, publication: ModulePublication, sent: Sent) -> None:
        """What is left to do once the engine is through (its mirrors are written)."""
        key = row.idempotency_key
        if sent.state == "dead":
            self.park(row, "its publication failed every attempt: replay it with "
                           f"`followup dead-letters replay action:{key}`")  # fmt: skip
        elif sent.state == "done":  # Moodle took it in an earlier run
            self.book.mark(row, "published")
            self.read_back(row)
        elif sent.state == "found" and sent.provider_ref is not None:  # its look-up read it
            confirm(self.ledger, self.spec(row), publication, sent.provider_ref, note=VISIBLE)
        elif sent.state == "in_flight":
            self.counts["in_flight"] += 1
        elif sent.state == "unreadable" and sent.error is not None:
            raise sent.error  # Moodle cannot tell now: left for the next run
        elif sent.state == "failed" and sent.error is not None:
            publication.failed(sent)
            if self.ledger.dead(key):
                self.park(row, f"its publication failed every attempt: {sent.error}")
        elif sent.state == "sent":
            self.counts["not_read_back"] += 1

    def published_not_confirmed(self, row: ContentRow) -> None:
        """Read back a version Moodle took; after ``RECONFIRM`` without a read-back, queue it
        with the owner (a token that may not see ``visible``, a module hidden again)."""
        try:
            confirmed = self.read_back(row)
        except IntegrationError as error:
            self.park_unconfirmed(row, f"Moodle cannot be asked: {error}")
            raise
        if not confirmed:
            self.park_unconfirmed(row, "Moodle shows its module hidden")

    def park_unconfirmed(self, row: ContentRow, why: str) -> None:
        if row.published_at is not None and self.run.now - row.published_at >= RECONFIRM:
            self.park(row, f"published {row.published_at:%Y-%m-%d %H:%M}Z, not read back: {why}")

    def read_back(self, row: ContentRow) -> bool:
        """``confirmed`` when Moodle shows the module visible (else a later run asks again);
        whether it was."""
        if not self.site.module_visible(row.cmid):
            self.counts["not_read_back"] += 1
            return False
        publication = ModulePublication(row, self.site, self.book)
        confirm(self.ledger, self.spec(row), publication, str(row.cmid))
        return True

    def park(self, row: ContentRow, reason: str) -> None:
        """Queue the version with the tenant's owner."""
        what = f"content {row.content_id} v{row.version} ({row.title})"
        if self.queue.park(row.idempotency_key, "publication", what, reason):
            self.counts["queued"] += 1


def publish_tenant(
    run: RunScope, db: LockableDatabase, tenant: Tenant, site: CourseSite, settings: Settings
) -> Counter[str]:
    """The tenant's content due now: published once, held with the reason, or queued."""
    return TenantContent(run, db, tenant, site, settings).run_due()
