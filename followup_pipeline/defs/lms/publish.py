"""Content publishing (docs/architecture.md §10): a version of a piece of content whose time came
is published (its course module in Moodle made visible) only when it meets every prerequisite:
approved, and the current version of its content. An outdated version is never put out; content
not approved waits, says why, and goes to the catch-up queue with the tenant's owner.

Each publication re-checks approval and version under a lock on the version's row, in the same
transaction that records the ledger's ``attempted``, then shows the module
(``core_courseformat_update_course``, ``cm_show``) and reads it back
(``core_course_get_course_module``): ``confirmed`` when Moodle shows it visible. A lost answer is
settled by that read-back, never by a blind second request.
"""

from collections import Counter
from datetime import timedelta

from followup_pipeline.defs.lms.catch_up import CatchUp
from followup_pipeline.defs.lms.ports import CourseSite
from followup_pipeline.engine.ledger import ActionLedger
from followup_pipeline.engine.mailer import LockableDatabase
from followup_pipeline.engine.scope import RunScope
from followup_pipeline.integrations.errors import IntegrationError, TransientError
from followup_pipeline.settings import Settings
from followup_pipeline.store import ledger as rows
from followup_pipeline.store import lms_content
from followup_pipeline.store.lms import Tenant
from followup_pipeline.store.lms_content import ContentRow, content_lock
from followup_pipeline.store.run_lock import RunLock

#: How long a publication not read back yet waits before it is queued with the owner (it is
#: asked about again at every run).
RECONFIRM = timedelta(days=2)


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
        self.queue = CatchUp(db, tenant, settings, run.now)
        self.counts: Counter[str] = Counter()

    def run_due(self) -> Counter[str]:
        """Publish, hold or leave every version due now; the counts."""
        with self.db.connection() as conn:
            due = lms_content.rows(conn, self.tenant.id, due=self.run.now)
        for row in due:
            # One lock per piece of content, which `followup lms content add` and `approve` take
            # too: no version is added or approved between the re-check and Moodle's answer.
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

    def spec(self, row: ContentRow) -> rows.ActionSpec:
        """The ledger action of a version's publication."""
        return rows.ActionSpec(
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
        key = row.idempotency_key
        if row.state == "published":
            self.published_not_confirmed(row)
            return
        if self.ledger.dead(key):
            self.park(row, f"its publication failed every attempt: replay it with "
                           f"`followup dead-letters replay action:{key}`")  # fmt: skip
            return
        prior = self.ledger.prior(key)
        if prior.done:
            self.mark(row, "published")
            self.read_back(row)
            return
        if prior.maybe_done:
            if self.ledger.in_flight(prior):
                self.counts["in_flight"] += 1
                return
            if self.site.module_visible(row.cmid):  # it went: recorded, never sent again
                self.ledger.found(self.spec(row), provider_ref=str(row.cmid), note="visible")
                self.mark(row, "published")
                self.read_back(row)
                return
        attempt = self.checked_attempt(row)
        if attempt is None:
            return
        self.ledger.touch(attempt)
        try:
            self.site.show_module(row.cmid, row.course_id)
        except IntegrationError as error:
            maybe = isinstance(error, TransientError) and error.ambiguous
            self.ledger.fail(attempt, str(error)[:500], maybe_done=maybe)
            self.mark(row, "unknown" if maybe else "failed", reason=str(error)[:300])
            self.counts["publish_failed"] += 1
            if self.ledger.dead(key):
                self.park(row, f"its publication failed every attempt: {error}"[:500])
            return
        self.ledger.finish(attempt, "accepted", provider_ref=str(row.cmid))
        self.mark(row, "published")
        self.counts["published"] += 1
        self.read_back(row)

    def checked_attempt(self, row: ContentRow) -> rows.Attempt | None:
        """The re-check under the row's lock, and ``attempted`` in the same transaction: None
        when the version is not to be published now (and why is recorded)."""
        with self.db.connection() as conn, conn.transaction():
            now = lms_content.lock(conn, row.tenant_id, row.content_id, row.version)
            if now is None or now.state not in ("waiting", "attempted", "failed", "unknown"):
                return None  # settled meanwhile
            if not now.current:
                why = f"superseded by version {now.current_version}: never published"
                lms_content.set_state(conn, now, "superseded", at=self.run.now, reason=why)
                rows.suppress(conn, self.spec(now), reason="superseded")
                self.counts["superseded"] += 1
                superseded = True
            else:
                superseded = False
            if not superseded and now.approved_by is None:
                why = f"not approved (version {now.version}; due {now.publish_at:%Y-%m-%d %H:%M})"
                lms_content.set_state(conn, now, now.state, at=self.run.now, reason=why)
            elif not superseded and (self.tenant.mode != "live" or self.ledger.dry_run):
                mode = "dry" if self.ledger.dry_run else self.tenant.mode
                why = f"approved; not published: the tenant runs {mode}"
                lms_content.set_state(conn, now, now.state, at=self.run.now, reason=why)
            elif not superseded:
                lms_content.set_state(conn, now, "attempted", at=self.run.now)
                return rows.begin_attempt(
                    conn, self.spec(now), started_at=self.run.now, run_id=self.run.run_id
                )
        if superseded:
            self.queue.close(row.idempotency_key, "superseded: a later version replaced it")
        elif now.approved_by is None:
            self.counts["waiting_approval"] += 1
            command = f"followup lms content approve {now.tenant_id} {now.content_id} {now.version}"
            self.park(now, f"due and not approved: approve it with `{command} --by NAME`")
        else:
            self.counts[f"held_{self.tenant.mode}"] += 1
        return None

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
        with self.db.connection() as conn, conn.transaction():
            rows.confirm(conn, row.idempotency_key, str(row.cmid))
            lms_content.set_state(conn, row, "confirmed", at=self.run.now)
        self.queue.close(row.idempotency_key, "published and read back")
        self.counts["confirmed"] += 1
        return True

    def mark(self, row: ContentRow, state: str, *, reason: str | None = None) -> None:
        with self.db.connection() as conn, conn.transaction():
            lms_content.set_state(conn, row, state, at=self.run.now, reason=reason)

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
