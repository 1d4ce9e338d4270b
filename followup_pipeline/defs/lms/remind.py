"""The reminders of a tenant that fell due (docs/architecture.md §10): in the tenant's business
hours, what is due is read from the records (never from which ticks ran), so a reminder due
while the machine was down goes out once when it is back. After an outage only the latest due
reminder of an assignment goes out; the ones it overtook are suppressed (``superseded``).

Before a send, check again: a quiz completed (Moodle's completion state) or a learner who opted
out suppresses the reminder with that reason; a tenant in mode ``dry`` suppresses it with
``dry_run``. A send is a ledger action under the record's key, by e-mail (``engine/mailer.py``:
the key on the message, Sent Items asked before a resend) or by Moodle's own message (the key's
marker in its text, the learner's messages read before a resend: Moodle has no idempotency of
its own). A send the provider accepted is then read back (the mail in Sent Items, the message in
the learner's messages): ``confirmed``.
"""

import hashlib
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol
from zoneinfo import ZoneInfo

from followup_pipeline.defs.lms.catch_up import CatchUp
from followup_pipeline.defs.lms.ports import LmsSite
from followup_pipeline.defs.lms.sync import CATCH_UP, tenant_calendar
from followup_pipeline.domain.reminders import DueReminder, in_business_hours, latest_of_each
from followup_pipeline.engine.ledger import ActionLedger
from followup_pipeline.engine.mailer import LockableDatabase, Mailer, MailError
from followup_pipeline.engine.scope import RunScope
from followup_pipeline.integrations.errors import IntegrationError
from followup_pipeline.settings import Settings
from followup_pipeline.store import ledger as rows
from followup_pipeline.store import lms, lms_queue
from followup_pipeline.store.lms import DueRow, Tenant
from followup_pipeline.store.run_lock import RunLock

#: How long a sent reminder that was not read back yet is asked about again.
RECONFIRM = timedelta(days=2)
#: What each reminder says first.
OPENING = {
    "before_due": "is due in two days",
    "due_day": "is due today",
    "overdue": "was due and is still open",
}


class SentItems(Protocol):
    """What a read-back of a sent mail needs: its id in Sent Items by the key it carried."""

    def find_sent(self, key: str) -> str | None:
        """The sent message's id, None when it is not there."""
        ...


@dataclass(frozen=True)
class Channel:
    """How a tenant's reminders go out: its Moodle (always, for the re-check) and, for e-mail,
    the mailer from the tenant's mailbox and that mailbox's Sent Items."""

    site: LmsSite
    mailer: Mailer | None = None
    sent_items: SentItems | None = None


def marker(key: str) -> str:
    """A short mark of ``key`` carried in a Moodle message (and as its ``clientmsgid``)."""
    return "fu-" + hashlib.sha256(key.encode()).hexdigest()[:16]


def message_text(row: DueRow, zone: str) -> tuple[str, str]:
    """The reminder's subject and text."""
    due = ""
    if row.quiz_due_at is not None:
        due = f" (due {row.quiz_due_at.astimezone(ZoneInfo(zone)):%Y-%m-%d %H:%M %Z})"
    subject = f"Reminder: {row.quiz_name} {OPENING.get(row.action_type, 'is open')}"
    who = row.learner_name or "there"
    text = (
        f"Hello {who},\n\nthe quiz {row.quiz_name}{due} {OPENING.get(row.action_type, '')}. "
        "Please complete it in the academy.\n\nref " + marker(row.idempotency_key)
    )
    return subject, text


class TenantReminders:
    """One run's reminders of one tenant."""

    def __init__(
        self, run: RunScope, db: LockableDatabase, tenant: Tenant, channel: Channel,
        settings: Settings,
    ) -> None:  # fmt: skip
        self.run = run
        self.db = db
        self.tenant = tenant
        self.channel = channel
        self.settings = settings
        self.counts: Counter[str] = Counter()
        self.ledger = ActionLedger.of(db, run, settings)
        self.queue = CatchUp(db, tenant, settings, run.now)

    def run_due(self) -> Counter[str]:
        """Send, suppress or leave every reminder due now; the counts."""
        tenant, now = self.tenant, self.run.now
        hours = (tenant.hours_start, tenant.hours_end)
        calendar = tenant_calendar(tenant)
        if not in_business_hours(now, zone=tenant.time_zone, calendar=calendar, hours=hours):
            self.counts["outside_business_hours"] += 1
            return self.counts
        with self.db.connection() as conn:
            due = lms.due(conn, tenant.id, now, confirm_since=now - RECONFIRM)
        by_id = {row.id: row for row in due}
        open_ = [row for row in due if row.delivery_outcome != "accepted"]
        reminders = [
            DueReminder(row.id, (row.tenant_id, row.learner_id, row.assignment_id),
                        row.action_type, row.due_at)
            for row in open_
        ]  # fmt: skip
        latest, overtaken = latest_of_each(reminders)
        work = [(by_id[r.id], True) for r in overtaken] + [(by_id[r.id], False) for r in latest]
        work += [(row, False) for row in due if row.delivery_outcome == "accepted"]
        for row, overtaken_ in work:
            try:
                self.guarded(row, overtaken=overtaken_)
            except (_Left, IntegrationError) as error:
                # This reminder waits for the next run; the others go on.
                self.counts["left_for_next_run"] += 1
                self.run.log.warning("%s: left for the next run: %s", row.idempotency_key, error)
        return self.counts

    def guarded(self, row: DueRow, *, overtaken: bool) -> None:
        """One reminder, under a lock on its key: two runs at once cannot both send it."""
        owner = self.run.run_id or "lms"
        lock = RunLock.try_take(self.db.url, f"reminder:{row.idempotency_key}", owner=owner)
        try:
            if not lock.held:
                self.counts["in_flight"] += 1
                return
            self.one(row, overtaken=overtaken)
        finally:
            lock.release()

    def spec(self, row: DueRow) -> rows.ActionSpec:
        """The ledger action of a reminder."""
        return rows.ActionSpec(
            key=row.idempotency_key,
            kind="reminder",
            due_at=row.due_at,
            time_zone=row.time_zone,
            payload={
                "tenant": row.tenant_id,
                "learner": row.learner_id,
                "quiz": row.assignment_id,
                "action_type": row.action_type,
                "channel": self.tenant.channel,
            },
        )

    def one(self, row: DueRow, *, overtaken: bool) -> None:
        """Settle what an earlier send left, then re-check, then send or suppress."""
        if self.ledger.dead(row.idempotency_key):
            # Failed its every attempt: past its catch-up window it expires (and leaves the
            # queue); until then it waits in the catch-up queue with the tenant's owner.
            if self.run.now - row.due_at > CATCH_UP:
                self.suppress(row, "expired")
                return
            if row.completed_at is not None:  # the learner completed it meanwhile
                self.suppress(row, "completed")
                return
            self.counts["dead"] += 1
            action = self.ledger.prior(row.idempotency_key).action
            error = action.last_error if action is not None else None
            who = row.learner_name or f"learner {row.learner_id}"
            what = f"{row.action_type} reminder of {who} for {row.quiz_name}"
            reason = f"it failed every attempt ({error or 'no error recorded'}); replay it with "
            reason += f"`followup dead-letters replay action:{row.idempotency_key}`"
            if self.queue.park(row.idempotency_key, "reminder", what, reason):
                self.counts["queued"] += 1
            return
        prior = self.ledger.prior(row.idempotency_key)
        if prior.done and prior.action is not None:
            # Sent by an earlier run: mirror it, and read it back if that was not done yet.
            self.settle(row, prior.action.outcome)
            if prior.action.outcome == "accepted":
                self.confirm(row, self.read_back(row))
            return
        if prior.maybe_done:
            if self.ledger.in_flight(prior):
                self.counts["in_flight"] += 1  # its request may still be landing
                return
            found = self.read_back(row)
            if found is not None:  # it went: never sent again
                self.ledger.found(self.spec(row), provider_ref=found, note="found by read-back")
                self.settle(row, "accepted")
                self.confirm(row, found)
                return
        # Not sent (or never tried): check again before anything goes out.
        if overtaken:
            self.suppress(row, "superseded")
            return
        if self.run.now - row.due_at > CATCH_UP:
            self.suppress(row, "expired")
            return
        closed = row.quiz_due_at is not None and self.run.now >= row.quiz_due_at
        if row.action_type != "overdue" and closed:  # the quiz closed: the overdue one follows
            self.suppress(row, "superseded")
            return
        if row.completed_at is not None or self.completed(row):
            self.suppress(row, "completed")
            return
        with self.db.connection() as conn:
            opted = lms.opted_out(conn, row.tenant_id, row.learner_id, row.action_type)
        if opted:
            self.suppress(row, "opted_out")
            return
        if self.tenant.mode != "live":
            self.suppress(row, "dry_run")
            return
        if self.tenant.channel == "moodle":
            self.by_moodle(row)
        else:
            self.by_mail(row)

    def read_back(self, row: DueRow) -> str | None:
        """The provider's id of the reminder's message, when it has it (Sent Items, or the
        learner's messages in Moodle)."""
        if self.tenant.channel == "moodle":
            found = self.channel.site.find_message(row.learner_id, marker(row.idempotency_key))
            return str(found.id) if found is not None else None
        items = self.channel.sent_items
        return items.find_sent(row.idempotency_key) if items is not None else None

    def completed(self, row: DueRow) -> bool:
        """Moodle's completion state of the quiz (or a finished attempt), now; kept."""
        try:
            done = self.channel.site.quiz_completed(
                row.course_id, row.learner_id, row.coursemodule, row.assignment_id
            )
        except IntegrationError as error:
            self.counts["recheck_failed"] += 1
            raise _Left(f"completion unreadable: {error}") from None
        if done:
            with self.db.connection() as conn, conn.transaction():
                lms.mark_completed(
                    conn, row.tenant_id, row.learner_id, row.assignment_id, self.run.now
                )
        return done

    def suppress(self, row: DueRow, reason: rows.SuppressReason) -> None:
        """Record the reminder suppressed for ``reason`` (ledger and record in one transaction);
        one that reached the provider already keeps its outcome."""
        with self.db.connection() as conn, conn.transaction():
            if rows.suppress(conn, self.spec(row), reason=reason):
                lms.settle(conn, row.id, "suppressed", reason=reason, at=self.run.now)
                lms_queue.close(conn, row.idempotency_key, f"suppressed: {reason}", at=self.run.now)
                self.counts[f"suppressed_{reason}"] += 1
                return
            action = rows.action_by_key(conn, row.idempotency_key)
            outcome = action.outcome if action is not None else "accepted"
            lms.settle(conn, row.id, outcome, at=self.run.now)

    def settle(self, row: DueRow, outcome: str) -> None:
        """Mirror the ledger's outcome on the record; a send that reached the provider counts as
        the assignment's latest successful action."""
        with self.db.connection() as conn, conn.transaction():
            lms.settle(conn, row.id, outcome, at=self.run.now)
            if outcome in ("accepted", "confirmed"):
                lms_queue.close(conn, row.idempotency_key, f"sent: {outcome}", at=self.run.now)
                lms.mark_succeeded(
                    conn, row.tenant_id, row.learner_id, row.assignment_id, self.run.now
                )
        self.counts[f"reminders_{outcome}"] += 1

    def refused(self, row: DueRow, why: str) -> None:
        """A send that cannot be made for this learner: a failed attempt (no request), so that
        it ends a dead letter after its attempts, alerted, rather than retried for ever."""
        attempt = self.ledger.begin(self.spec(row))
        if attempt is not None:
            self.ledger.fail(attempt, why, maybe_done=False)
        self.settle(row, "failed")

    def by_mail(self, row: DueRow) -> None:
        """Send by e-mail once per key (the mailer asks Sent Items after a lost answer)."""
        mailer = self.channel.mailer
        if mailer is None or not row.learner_email:
            self.refused(row, "the learner has no e-mail address in Moodle")
            return
        subject, text = message_text(row, self.tenant.time_zone)
        html = "<p>" + "</p><p>".join(
            part.replace("&", "&amp;").replace("<", "&lt;") for part in text.split("\n\n")
        ) + "</p>"  # fmt: skip
        self.settle(row, "attempted")
        try:
            result = mailer.send_once(
                key=row.idempotency_key,
                kind="reminder",
                to=[row.learner_email],
                subject=subject,
                html=html,
                payload=self.spec(row).payload,
            )
        except MailError as error:
            self.run.log.warning("%s: %s", row.idempotency_key, error)
            action = self.ledger.prior(row.idempotency_key).action
            self.settle(row, action.outcome if action is not None else "failed")
            return
        if result.outcome == "in_flight":
            self.counts["in_flight"] += 1
            return
        if result.outcome == "suppressed":  # the machine runs dry (the ledger recorded it)
            with self.db.connection() as conn, conn.transaction():
                lms.settle(conn, row.id, "suppressed", reason="dry_run", at=self.run.now)
            self.counts["suppressed_dry_run"] += 1
            return
        self.settle(row, "accepted")
        self.confirm(row, self.read_back(row))

    def by_moodle(self, row: DueRow) -> None:
        """Send as Moodle's own message once per key (no idempotency of Moodle's: the lock, the
        ledger and the read-back before a resend); read it back."""
        site, mark = self.channel.site, marker(row.idempotency_key)
        attempt = self.ledger.begin(self.spec(row))
        if attempt is None:
            self.settle(row, "accepted")
            return
        self.settle(row, "attempted")
        self.ledger.touch(attempt)
        _, text = message_text(row, self.tenant.time_zone)
        try:
            sent = site.send_message(row.learner_id, text, mark)
        except IntegrationError as error:
            self.ledger.fail(attempt, str(error)[:500], maybe_done=True)
            self.settle(row, "unknown")
            return
        if sent.msgid < 0:  # Moodle refused this message (blocked, messaging off)
            self.ledger.fail(attempt, f"refused: {sent.errormessage}"[:500], maybe_done=False)
            self.settle(row, "failed")
            return
        self.ledger.finish(attempt, "accepted", provider_ref=str(sent.msgid))
        self.settle(row, "accepted")
        self.confirm(row, self.read_back(row))

    def confirm(self, row: DueRow, provider_ref: str | None) -> None:
        """Read back: ``confirmed`` when the provider shows it (else a later run asks again)."""
        if provider_ref is None:
            self.counts["not_read_back"] += 1
            return
        with self.db.connection() as conn, conn.transaction():
            if rows.confirm(conn, row.idempotency_key, provider_ref):
                lms.settle(conn, row.id, "confirmed", at=self.run.now)
        self.counts["reminders_confirmed"] += 1


class _Left(Exception):
    """A reminder left for the next run (its re-check could not be made)."""


def remind_tenant(
    run: RunScope, db: LockableDatabase, tenant: Tenant, channel: Channel, settings: Settings
) -> Counter[str]:
    """The tenant's due reminders, each on its own: one that cannot be re-checked now waits."""
    return TenantReminders(run, db, tenant, channel, settings).run_due()
