"""Certificates (docs/architecture.md §10): every learner who met a course's completion
requirements (Moodle's course completion state) is compared with what the credential platform
holds when it is read back, never with what a workflow says it did.

Once an hour per tenant (``CHECK_EVERY``), for each course the tenant certifies (its credential
group): the completions are read from Moodle and recorded (``lms_certificates``); the group's
credentials are read from the platform; then each certificate:

- held by the platform (a credential carrying its key, or one for the learner's address): it is
  ``confirmed`` (an export whose answer was lost is recorded found, never issued twice);
- issued or confirmed before and no longer there (after the in-flight window, and not found by
  its id either): the platform lost it; its next generation is issued, under the next key;
- missing: issued through the action ledger (``attempted`` committed before the request, the key
  as the credential's own id and in its ``meta_data``), then read back by id: ``confirmed``;
- a learner without an address, or an export that failed its every attempt, goes to the catch-up
  queue with the tenant's owner; a tenant in mode ``dry`` records it suppressed (``dry_run``),
  and a later live run issues the next generation.
"""

from collections import Counter
from collections.abc import Sequence
from datetime import timedelta

from followup_pipeline.defs.lms.catch_up import CatchUp
from followup_pipeline.defs.lms.ports import CourseSite, CredentialPlatform, Issued
from followup_pipeline.engine.ledger import ActionLedger, DryRun
from followup_pipeline.engine.mailer import LockableDatabase
from followup_pipeline.engine.scope import RunScope
from followup_pipeline.integrations.errors import (
    IntegrationError,
    PermanentError,
    SchemaError,
    TransientError,
)
from followup_pipeline.settings import Settings
from followup_pipeline.store import ledger as rows
from followup_pipeline.store import lms_certificates as certs
from followup_pipeline.store.lms import Tenant
from followup_pipeline.store.lms_certificates import CertificateRow, Completion
from followup_pipeline.store.run_lock import RunLock

#: How often a tenant's certificates are reconciled with Moodle and the platform.
CHECK_EVERY = timedelta(hours=1)
#: Moodle's answers that are about the whole course, not one learner.
COURSE_LEVEL = ("nocriteriaset", "cannotviewreport")


def certified_courses(tenant: Tenant) -> dict[int, int]:
    """The tenant's certified courses: course id → credential group id."""
    return {int(course): int(group) for course, group in tenant.credential_groups.items()}


class TenantCertificates:
    """One run's reconciliation of one tenant's certificates."""

    def __init__(
        self,
        run: RunScope,
        db: LockableDatabase,
        tenant: Tenant,
        site: CourseSite,
        platform: CredentialPlatform,
        settings: Settings,
    ) -> None:
        self.run = run
        self.db = db
        self.tenant = tenant
        self.site = site
        self.platform = platform
        self.ledger = ActionLedger.of(db, run, settings)
        self.queue = CatchUp(db, tenant, settings, run.now)
        self.counts: Counter[str] = Counter()

    def reconcile(self) -> Counter[str]:
        """Read the completions and the platform, then settle each certificate."""
        courses = certified_courses(self.tenant)
        with self.db.connection() as conn:
            recorded = {(r.course_id, r.learner_id) for r in certs.rows(conn, self.tenant.id)}
        for course_id, group_id in courses.items():
            self.read_completions(course_id, group_id, recorded)
        held: dict[int, list[Issued]] = {}
        unreadable: set[int] = set()
        for group in set(courses.values()):
            invalid: list[SchemaError] = []
            held[group] = list(self.platform.in_group(group, invalid=invalid))
            for error in invalid:
                # Kept in the log with its field; such a group issues nothing this run: the
                # unreadable item may be the learner's credential.
                self.run.log.warning("%s group %s: %s", self.tenant.id, group, error)
                unreadable.add(group)
        with self.db.connection() as conn:
            listed = certs.rows(conn, self.tenant.id)
        for row in listed:
            if row.course_id not in courses:
                continue  # the course is no longer certified
            try:
                self.guarded(row, held.get(row.group_id, []), row.group_id in unreadable)
            except IntegrationError as error:
                self.counts["left_for_next_run"] += 1
                self.run.log.warning("%s: left for the next run: %s", row.idempotency_key, error)
        with self.db.connection() as conn, conn.transaction():
            certs.set_checked(conn, self.tenant.id, self.run.now)
        return self.counts

    def read_completions(
        self, course_id: int, group_id: int, recorded: set[tuple[int, int]]
    ) -> None:
        """Record every learner of the course who met its completion requirements (those
        recorded before are not asked again). A course Moodle cannot report on (no criteria,
        completion off) is queued with the owner; one learner it cannot tell is skipped."""
        key = f"lms-cert-course:{self.tenant.id}:{course_id}"
        try:
            learners = self.site.enrolled_users(course_id)
            for learner in learners:
                if (course_id, learner.id) in recorded:
                    continue
                try:
                    status = self.site.course_completion(course_id, learner.id)
                except PermanentError as error:
                    if getattr(error, "errorcode", None) in COURSE_LEVEL:
                        raise
                    self.counts["completion_unreadable"] += 1
                    self.run.log.warning("%s learner %s: %s", key, learner.id, error)
                    continue
                if not status.completed:
                    continue
                completion = Completion(
                    tenant_id=self.tenant.id,
                    learner_id=learner.id,
                    course_id=course_id,
                    group_id=group_id,
                    learner_name=learner.fullname,
                    learner_email=learner.email,
                    completed_at=status.completed_at or self.run.now,
                )
                with self.db.connection() as conn, conn.transaction():
                    new = certs.seen(conn, completion, at=self.run.now)
                self.counts["completions_new"] += new
        except PermanentError as error:
            # Its certificates recorded before are still settled, the other courses go on.
            self.counts["completions_unreadable"] += 1
            self.run.log.warning("%s: %s", key, error)
            what = f"certificates of course {course_id}"
            reason = f"Moodle cannot report the course's completions: {error}"
            self.queue.park(key, "certificate", what, reason[:500])
            return
        self.queue.close(key, "the course's completions are readable again")

    def guarded(self, row: CertificateRow, held: Sequence[Issued], unreadable: bool) -> None:
        """One certificate, under a lock on the learner's course: two runs cannot both issue.
        ``unreadable``: the platform's listing had items that broke the schema."""
        name = f"certificate:{row.tenant_id}:{row.learner_id}:{row.course_id}"
        lock = RunLock.try_take(self.db.url, name, owner=self.run.run_id or "lms")
        try:
            if not lock.held:
                self.counts["in_flight"] += 1
                return
            self.one(row, held, unreadable)
        finally:
            lock.release()

    def spec(self, row: CertificateRow) -> rows.ActionSpec:
        """The ledger action of a certificate's export."""
        return rows.ActionSpec(
            key=row.idempotency_key,
            kind="certificate",
            due_at=row.completed_at,
            time_zone=self.tenant.time_zone,
            payload={
                "tenant": row.tenant_id,
                "learner": row.learner_id,
                "course": row.course_id,
                "group": row.group_id,
                "generation": row.generation,
            },
        )

    @staticmethod
    def match(row: CertificateRow, held: Sequence[Issued]) -> Issued | None:
        """The platform's credential of this certificate: one carrying its key, else one for
        the learner's address in the group (issued by an earlier generation, or by hand)."""
        for credential in held:
            if credential.carries(row.idempotency_key):
                return credential
        address = (row.learner_email or "").strip().lower()
        if address:
            for credential in held:
                if credential.email.strip().lower() == address:
                    return credential
        return None

    def one(self, row: CertificateRow, held: Sequence[Issued], unreadable: bool) -> None:
        """Confirm what the platform holds; issue again what it lost; issue what is missing."""
        found = self.match(row, held)
        if found is not None:
            self.confirmed(row, found)
            return
        if unreadable:
            self.counts["left_listing_unreadable"] += 1  # it may be the unreadable item
            return
        prior = self.ledger.prior(row.idempotency_key)
        if row.state in ("issued", "confirmed") or prior.done:
            # The platform took it once (a run may have died before recording so here).
            if prior.action is not None and prior.age_s < self.ledger.in_flight_s:
                self.counts["in_flight"] += 1  # so recent that a search may not show it yet
                return
            issued_as = row.credential_id or (prior.action.provider_ref if prior.action else None)
            if issued_as is not None:
                again = self.platform.credential(issued_as)
                if again is not None:
                    self.confirmed(row, again)
                    return
            row = self.reissue(row, lost=True)
        elif row.state == "suppressed" and self.tenant.mode == "live":
            row = self.reissue(row, lost=False)  # recorded in a dry run: issued now
        elif row.state == "suppressed":
            return
        self.issue(row)

    def reissue(self, row: CertificateRow, *, lost: bool) -> CertificateRow:
        """Move to the certificate's next generation; the row as it is now."""
        with self.db.connection() as conn, conn.transaction():
            key = certs.reissue(conn, row, lost=lost, at=self.run.now)
            fresh = next(r for r in certs.rows(conn, row.tenant_id) if r.idempotency_key == key)
        if lost:
            self.counts["lost_issued_again"] += 1
            self.run.log.warning(
                "%s: the platform no longer holds credential %s; issued again as %s",
                row.idempotency_key,
                row.credential_id,
                key,
            )
        return fresh

    def issue(self, row: CertificateRow) -> None:
        """Issue the export once through the ledger, then read it back."""
        key = row.idempotency_key
        if self.ledger.dead(key):
            self.park(row, "its export failed every attempt: replay it with "
                           f"`followup dead-letters replay action:{key}`")  # fmt: skip
            return
        prior = self.ledger.prior(key)
        if prior.done:
            return  # accepted, not held: settled by the next read-back
        if self.ledger.in_flight(prior):
            self.counts["in_flight"] += 1
            return
        if prior.maybe_done:
            # Its answer was lost and the search did not show it: ask by our key before a
            # second create.
            landed = self.platform.credential(key)
            if landed is not None:
                self.confirmed(row, landed)
                return
        if not row.learner_email:
            self.park(row, "the learner has no e-mail address in Moodle")
            return
        if self.tenant.mode != "live":
            self.suppress_dry(row)
            return
        try:
            attempt = self.ledger.begin(self.spec(row))
        except DryRun:
            self.set_state(row, "suppressed", reason="dry_run")
            return
        if attempt is None:
            return
        self.set_state(row, "attempted")
        self.ledger.touch(attempt)
        try:
            issued = self.platform.issue(
                group_id=row.group_id,
                name=row.learner_name or row.learner_email,
                email=row.learner_email,
                issued_on=row.completed_at.date(),
                key=key,
            )
        except IntegrationError as error:
            # A lost answer, or a 2xx whose body we could not read: it may have been made.
            maybe = (isinstance(error, TransientError) and error.ambiguous) or isinstance(
                error, SchemaError
            )
            self.ledger.fail(attempt, str(error)[:500], maybe_done=maybe)
            self.set_state(row, "unknown" if maybe else "failed")
            self.counts["issue_failed"] += 1
            if self.ledger.dead(key):
                self.park(row, f"its export failed every attempt: {error}"[:500])
            return
        self.ledger.finish(attempt, "accepted", provider_ref=issued.id)
        self.set_state(row, "issued", credential_id=issued.id)
        self.counts["issued"] += 1
        back = self.platform.credential(issued.id)
        if back is not None:
            self.confirmed(row, back)
        else:
            self.counts["not_read_back"] += 1

    def confirmed(self, row: CertificateRow, credential: Issued) -> None:
        """The platform holds the certificate: confirm it (an answer lost before, found)."""
        if row.state == "confirmed" and row.credential_id == credential.id:
            self.counts["held"] += 1
            return
        prior = self.ledger.prior(row.idempotency_key)
        if prior.maybe_done or (prior.action is not None and prior.action.outcome == "failed"):
            self.ledger.found(self.spec(row), provider_ref=credential.id, note="found by read-back")
        with self.db.connection() as conn, conn.transaction():
            if prior.action is not None:
                rows.confirm(conn, row.idempotency_key, credential.id)
            certs.set_state(conn, row, "confirmed", at=self.run.now, credential_id=credential.id)
        self.queue.close(row.idempotency_key, f"confirmed: credential {credential.id}")
        self.counts["confirmed"] += 1

    def suppress_dry(self, row: CertificateRow) -> None:
        """The tenant runs dry: recorded, not issued."""
        with self.db.connection() as conn, conn.transaction():
            rows.suppress(conn, self.spec(row), reason="dry_run")
            certs.set_state(conn, row, "suppressed", at=self.run.now, reason="dry_run")
        self.counts["suppressed_dry_run"] += 1

    def set_state(
        self,
        row: CertificateRow,
        state: str,
        *,
        reason: str | None = None,
        credential_id: str | None = None,
    ) -> None:
        with self.db.connection() as conn, conn.transaction():
            certs.set_state(
                conn, row, state, at=self.run.now, reason=reason, credential_id=credential_id
            )

    def park(self, row: CertificateRow, reason: str) -> None:
        """Queue the certificate with the tenant's owner."""
        who = row.learner_name or f"learner {row.learner_id}"
        what = f"certificate of {who} for course {row.course_id}"
        if self.queue.park(row.idempotency_key, "certificate", what, reason):
            self.counts["queued"] += 1
        else:
            self.counts["queued_before"] += 1


def certify_tenant(
    run: RunScope,
    db: LockableDatabase,
    tenant: Tenant,
    site: CourseSite,
    platform: CredentialPlatform,
    settings: Settings,
) -> Counter[str]:
    """Reconcile the tenant's certificates with Moodle and the credential platform."""
    return TenantCertificates(run, db, tenant, site, platform, settings).reconcile()
