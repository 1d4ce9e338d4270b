"""The learning reminders' door to the one list of work waiting for a person
(``engine/work.py``, docs/architecture.md §12): an open action of a tenant that can be neither
done nor suppressed — a reminder or a certificate that failed its every attempt, a learner
without an address, content due and not approved — waits with the tenant's named owner and
backup (the operations owner and backup where the tenant names none), and closes, with how,
when it is done or settled. The alert checks mail each new item to the operations list and its
owner (``defs/alerts/checks.py``); ``followup lms queue`` and ``followup work`` list them."""

from datetime import datetime

from followup_pipeline.domain.account import GRACE, next_open
from followup_pipeline.domain.calendar import BusinessCalendar
from followup_pipeline.domain.work import ItemKind
from followup_pipeline.engine import late
from followup_pipeline.engine.scope import Database
from followup_pipeline.settings import Settings
from followup_pipeline.store import lms, lms_content
from followup_pipeline.store import lms_certificates as certs
from followup_pipeline.store.lms import Tenant

#: The states of a certificate or a content version that is neither done nor settled.
UNSETTLED = ("missing", "waiting", "failed", "unknown")


class CatchUp:
    """One tenant's items of the list, in one run."""

    def __init__(self, db: Database, tenant: Tenant, settings: Settings, now: datetime) -> None:
        self.db = db
        self.tenant = tenant
        self.settings = settings
        self.now = now

    def park(self, key: str, kind: ItemKind, what: str, reason: str) -> bool:
        """The action waits with its owner (once while it waits); whether it is a new item."""
        with self.db.connection() as conn:
            return late.park(
                conn,
                action_key=key,
                kind=kind,
                tenant=self.tenant,
                what=what,
                reason=reason,
                settings=self.settings,
                at=self.now,
            )

    def close(self, key: str, how: str) -> bool:
        """Close the action's waiting item (if any), with how it ended."""
        with self.db.connection() as conn, conn.transaction():
            return late.settle_parked(conn, key, how, at=self.now)

    def park_late(self, error: BaseException) -> int:
        """Late means owned: the tenant cannot be reached (``error``), so each reminder due
        longer ago than its grace (``domain/account.py``) and neither sent nor settled goes on
        the owner's list, saying why. It closes by itself when it goes out once the vendor is
        back, or with how it ended: overtaken by a later one, or expired past the catch-up
        window. How many new items."""
        with self.db.connection() as conn:
            late = lms.late_reminders(
                conn, self.tenant.id, late_before=self.now - GRACE["reminder"]
            )
        calendar = BusinessCalendar(self.tenant.holiday_country, self.tenant.holiday_subdivision)
        hours = (self.tenant.hours_start, self.tenant.hours_end)
        zone = self.tenant.time_zone
        new = 0
        for row in late:
            opens = next_open(row.due_at, zone=zone, hours=hours, calendar=calendar)
            if self.now - opens <= GRACE["reminder"]:
                continue  # due outside the academy's hours: not late before they have run
            who = row.learner_name or f"learner {row.learner_id}"
            what = f"{row.action_type} reminder of {who} for {row.quiz_name or 'a quiz'}"
            reason = (
                f"late: the tenant cannot be reached ({error}); it goes out when it can be, "
                "unless a later reminder overtakes it or it expires 7 days after it was due"
            )
            new += self.park(row.key, "reminder", what, reason)
        return new

    def park_late_certificates(self, error: BaseException) -> int:
        """Late means owned, for certificates: the tenant's Moodle or credential platform cannot
        be reached (``error``), so each certificate of a completion older than its grace and not
        issued goes on the owner's list; it closes by itself once it is issued. New items."""
        with self.db.connection() as conn:
            rows = certs.rows(conn, self.tenant.id)
        late_before = self.now - GRACE["certificate"]
        new = 0
        for row in rows:
            if row.state in UNSETTLED and row.completed_at <= late_before:
                who = row.learner_name or f"learner {row.learner_id}"
                what = f"certificate of {who} for course {row.course_id}"
                new += self.park(row.idempotency_key, "certificate", what, _late(error))
        return new

    def park_late_publications(self, error: BaseException) -> int:
        """Late means owned, for content: the tenant's Moodle cannot be reached (``error``), so
        current version due longer ago than its grace and not published goes on the owner's
        list; it closes by itself once it is published or superseded. New items."""
        late_before = self.now - GRACE["publication"]
        with self.db.connection() as conn:
            rows = lms_content.rows(conn, self.tenant.id, due=late_before)
        new = 0
        for row in rows:
            # Late from its moment, or from when it was added if later (as the account says;
            # the database's clock: a machine on a set clock keeps the moment).
            added = row.created_at if row.created_at <= self.now else row.publish_at
            if row.state in UNSETTLED and row.current and max(row.publish_at, added) <= late_before:
                what = f"content {row.content_id} v{row.version} ({row.title})"
                approval = "" if row.approved_at else "; it is not approved either"
                new += self.park(row.idempotency_key, "publication", what, _late(error) + approval)
        return new


def _late(error: BaseException) -> str:
    return f"late: the tenant cannot be reached ({error}); it goes out when it can be"
