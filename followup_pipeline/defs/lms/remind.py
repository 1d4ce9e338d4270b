"""The reminders of a tenant that fell due (docs/architecture.md §10): in the tenant's business
hours, what is due is read from the records (never from which ticks ran), so a reminder due
while the machine was down goes out once when it is back. After an outage only the latest due
reminder of an assignment goes out; the ones it overtook are suppressed (``superseded``).

Each reminder, under a lock on its key, goes the engine's one way out (``engine/effects.py``):
what an earlier send left is settled first (dead, done, in flight, or looked up by its key at the
provider); then it is checked again — overtaken, past its catch-up window, its quiz closed or
completed (Moodle's completion state), its learner opted out — and suppressed with that reason,
or sent in the tenant's mode (``dry``: recorded, reason ``dry_run``) by e-mail or by Moodle's own
message (``reminder_delivery.py``) and read back: ``confirmed``. One accepted and not read back
yet is read back at the next runs (``RECONFIRM``). One that failed its every attempt waits in the
catch-up queue with the tenant's owner until it is replayed, completed or expired.
"""

from collections import Counter
from dataclasses import dataclass
from datetime import timedelta

from followup_pipeline.defs.lms.catch_up import CatchUp
from followup_pipeline.defs.lms.outbound import FOUND, confirm, tenant_mode
from followup_pipeline.defs.lms.ports import LmsSite, Mailbox
from followup_pipeline.defs.lms.reminder_delivery import (
    Letters,
    MailReminder,
    MoodleReminder,
    ReminderBook,
    ReminderSender,
)
from followup_pipeline.defs.lms.reminder_delivery import marker as marker
from followup_pipeline.defs.lms.sync import CATCH_UP, tenant_calendar
from followup_pipeline.domain.reminders import DueReminder, in_business_hours, latest_of_each
from followup_pipeline.engine.effects import ActionSpec, Outbound, Sent, SuppressReason
from followup_pipeline.engine.ledger import ActionLedger
from followup_pipeline.engine.mailer import LockableDatabase
from followup_pipeline.engine.scope import RunScope
from followup_pipeline.integrations.errors import IntegrationError
from followup_pipeline.machine import links_url
from followup_pipeline.settings import Settings
from followup_pipeline.store import lms
from followup_pipeline.store.links import link_keys
from followup_pipeline.store.lms import DueRow, Tenant
from followup_pipeline.store.run_lock import KeyLocks

#: How long a sent reminder that was not read back yet is asked about again.
RECONFIRM = timedelta(days=2)


@dataclass(frozen=True)
class Channel:
    """How a tenant's reminders go out: its Moodle (always, for the re-check) and, for e-mail,
    the tenant's mailbox."""

    site: LmsSite
    mailbox: Mailbox | None = None


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
        self.counts: Counter[str] = Counter()
        self.ledger = ActionLedger.of(db, run, settings)
        self.outbound = Outbound(self.ledger)
        self.book = ReminderBook(db, run.now, self.counts)
        self.queue = CatchUp(db, tenant, settings, run.now)
        self.letters = Letters(db, tenant, link_keys(settings), links_url(settings), run.now)
        self.settings = settings
        #: Reminders this run sent (``lms_sends_per_run`` caps them).
        self.sent = 0
        #: The reminders' locks, on one connection for the run (``guarded``).
        self.locks = KeyLocks(db.url, owner=run.run_id or "lms")
        #: The due quizzes of each learner and course (activity, quiz), and those Moodle said
        #: were completed when first asked this run: one call a learner and course.
        self.due_quizzes: dict[tuple[int, int], list[tuple[int, int]]] = {}
        self.completions: dict[tuple[int, int], set[int]] = {}

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
        for row in (r for r, overtaken_ in work if not overtaken_):  # (those re-checked)
            quizzes = self.due_quizzes.setdefault((row.course_id, row.learner_id), [])
            if (row.coursemodule, row.assignment_id) not in quizzes:
                quizzes.append((row.coursemodule, row.assignment_id))
        try:
            self.each(work)
        finally:
            self.locks.close()
        return self.counts

    def each(self, work: list[tuple[DueRow, bool]]) -> None:
        """Each due reminder on its own (``overtaken``: one a later reminder of its assignment
        overtook)."""
        cap = self.settings.lms_sends_per_run
        for row, overtaken_ in work:
            if not overtaken_ and self.sent >= cap:
                # Paced: the rest go at the next run (a backlog after an outage goes out at the
                # mailbox's and Moodle's pace, not all at once).
                self.counts["paced"] += 1
                continue
            try:
                self.guarded(row, overtaken=overtaken_)
            except (_Left, IntegrationError) as error:
                # This reminder waits for the next run; the others go on.
                self.counts["left_for_next_run"] += 1
                self.run.log.warning("%s: left for the next run: %s", row.idempotency_key, error)

    def guarded(self, row: DueRow, *, overtaken: bool) -> None:
        """One reminder, under a lock on its key: two runs at once cannot both send it."""
        name = f"reminder:{row.idempotency_key}"
        if not self.locks.take(name):
            self.counts["in_flight"] += 1
            return
        try:
            self.one(row, overtaken=overtaken)
        finally:
            self.locks.release(name)

    def spec(self, row: DueRow) -> ActionSpec:
        """The ledger action of a reminder."""
        return ActionSpec(
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

    def sender(self, row: DueRow) -> ReminderSender:
        """The reminder's vendor part, by the tenant's channel."""
        if self.tenant.channel == "moodle":
            return MoodleReminder(row, self.letters, self.book, self.channel.site)
        return MailReminder(row, self.letters, self.book, self.channel.mailbox)

    def one(self, row: DueRow, *, overtaken: bool) -> None:
        """Settle what an earlier send left, then re-check, then send or suppress."""
        spec, sender = self.spec(row), self.sender(row)
        sent = self.outbound.settle(spec, sender)
        if sent is None:
            reason = self.recheck(row, overtaken=overtaken)
            if reason is not None:
                sent = self.outbound.suppress(spec, sender, reason)
            else:
                sent = self.outbound.send(spec, sender, mode=tenant_mode(self.tenant))
                self.sent += sent.state in ("sent", "confirmed")
        self.ended(row, spec, sender, sent)

    def recheck(self, row: DueRow, *, overtaken: bool) -> SuppressReason | None:
        """Why the reminder is not to go out now (None: it goes)."""
        if overtaken:
            return "superseded"
        if self.run.now - row.due_at > CATCH_UP:
            return "expired"
        closed = row.quiz_due_at is not None and self.run.now >= row.quiz_due_at
        if row.action_type != "overdue" and closed:  # the quiz closed: the overdue one follows
            return "superseded"
        if row.completed_at is not None or self.completed(row):
            return "completed"
        with self.db.connection() as conn:
            if lms.opted_out(conn, row.tenant_id, row.learner_id, row.action_type):
                return "opted_out"
        return None

    def completed(self, row: DueRow) -> bool:
        """Moodle's completion state of the quiz (or a finished attempt), read once this run for
        every due quiz of the learner in the course; kept."""
        key, quiz = (row.course_id, row.learner_id), (row.coursemodule, row.assignment_id)
        asked = self.due_quizzes.setdefault(key, [])
        if key not in self.completions or quiz not in asked:
            if quiz not in asked:  # (not due when the run began: asked now, on its own)
                asked.append(quiz)
            try:
                self.completions[key] = self.channel.site.quizzes_completed(*key, asked)
            except IntegrationError as error:
                self.counts["recheck_failed"] += 1
                raise _Left(f"completion unreadable: {error}") from None
        done = row.assignment_id in self.completions[key]
        if done:
            with self.db.connection() as conn, conn.transaction():
                lms.mark_completed(
                    conn, row.tenant_id, row.learner_id, row.assignment_id, self.run.now
                )
        return done

    def ended(self, row: DueRow, spec: ActionSpec, sender: ReminderSender, sent: Sent) -> None:
        """What is left to do once the engine is through (its mirrors are written)."""
        state = sent.state
        if state == "dead":
            self.dead(row, spec, sender)
        elif state == "done":  # sent by an earlier run: read it back if that was not done yet
            if row.delivery_outcome not in ("accepted", "confirmed"):
                self.book.mark(row, "accepted")
            self.read_back(spec, sender)
        elif state == "found" and sent.provider_ref is not None:  # the look-up read it back
            confirm(self.ledger, spec, sender, sent.provider_ref, note=FOUND)
        elif state == "in_flight":
            self.counts["in_flight"] += 1  # its request may still be landing
        elif state == "unreadable":
            raise _Left(f"the provider cannot tell whether it has it: {sent.error}")
        elif state == "failed":
            self.run.log.warning("%s: %s", row.idempotency_key, sent.error)
            sender.failed(sent)
        elif state == "sent":
            self.counts["not_read_back"] += 1

    def read_back(self, spec: ActionSpec, sender: ReminderSender) -> None:
        """``confirmed`` when the provider shows it (else a later run asks again)."""
        found = sender.look_up(spec)
        if found is None:
            self.counts["not_read_back"] += 1
            return
        confirm(self.ledger, spec, sender, found)

    def dead(self, row: DueRow, spec: ActionSpec, sender: ReminderSender) -> None:
        """Failed its every attempt: past its catch-up window it expires (and leaves the queue);
        until then it waits in the catch-up queue with the tenant's owner."""
        if self.run.now - row.due_at > CATCH_UP:
            self.outbound.suppress(spec, sender, "expired")
            return
        if row.completed_at is not None:  # the learner completed it meanwhile
            self.outbound.suppress(spec, sender, "completed")
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


class _Left(Exception):
    """A reminder left for the next run (its re-check could not be made, or its provider
    cannot tell whether an earlier send went)."""


def remind_tenant(
    run: RunScope, db: LockableDatabase, tenant: Tenant, channel: Channel, settings: Settings
) -> Counter[str]:
    """The tenant's due reminders, each on its own: one that cannot be re-checked now waits."""
    return TenantReminders(run, db, tenant, channel, settings).run_due()
