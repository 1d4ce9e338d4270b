"""Certificates (docs/architecture.md §10): every learner who met a course's completion
requirements (Moodle's course completion state) is compared with what the credential platform
holds when it is read back, never with what a workflow says it did.

Once an hour per tenant (``CHECK_EVERY``), for each course the tenant certifies (its credential
group): the completions are read from Moodle and recorded (``course_completions.py``); the
group's credentials are read from the platform; then each certificate, under a lock on the
learner's course:

- held by the platform (a credential carrying its key, or one for the learner's address): it is
  ``confirmed`` (an export whose answer was lost is recorded found, never issued twice);
- issued or confirmed before and no longer there (after the in-flight window, and not found by
  its id either): the platform lost it; its next generation is issued, under the next key;
- missing: exported through the engine's one way out (``engine/effects.py``; the vendor part,
  ``credential_export.py``), in the tenant's mode: a tenant ``dry`` records it suppressed
  (``dry_run``), and a later live run issues the next generation;
- a learner without an address, or an export that failed its every attempt, goes to the catch-up
  queue with the tenant's owner.
"""

from collections import Counter
from collections.abc import Sequence
from datetime import timedelta

from followup_pipeline.defs.lms.catch_up import CatchUp
from followup_pipeline.defs.lms.course_completions import CourseCompletions
from followup_pipeline.defs.lms.credential_export import (
    NO_ADDRESS,
    CertificateBook,
    CredentialExport,
)
from followup_pipeline.defs.lms.outbound import FOUND, confirm, tenant_mode
from followup_pipeline.defs.lms.ports import CourseSite, CredentialPlatform, Issued
from followup_pipeline.engine.effects import ActionSpec, Outbound, error_text
from followup_pipeline.engine.ledger import ActionLedger
from followup_pipeline.engine.mailer import LockableDatabase
from followup_pipeline.engine.scope import RunScope
from followup_pipeline.integrations.errors import IntegrationError, SchemaError
from followup_pipeline.settings import Settings
from followup_pipeline.store import lms_certificates as certs
from followup_pipeline.store.lms import Tenant
from followup_pipeline.store.lms_certificates import CertificateRow
from followup_pipeline.store.run_lock import RunLock

#: How often a tenant's certificates are reconciled with Moodle and the platform.
CHECK_EVERY = timedelta(hours=1)


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
        self.platform = platform
        self.ledger = ActionLedger.of(db, run, settings)
        self.outbound = Outbound(self.ledger)
        self.queue = CatchUp(db, tenant, settings, run.now)
        self.counts: Counter[str] = Counter()
        self.book = CertificateBook(db, run.now, self.counts)
        self.completions = CourseCompletions(run, db, tenant, site, self.queue, self.counts)

    def reconcile(self) -> Counter[str]:
        """Read the completions and the platform, then settle each certificate."""
        courses = certified_courses(self.tenant)
        with self.db.connection() as conn:
            recorded = {(r.course_id, r.learner_id) for r in certs.rows(conn, self.tenant.id)}
        for course_id, group_id in courses.items():
            self.completions.read(course_id, group_id, recorded)
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

    def spec(self, row: CertificateRow) -> ActionSpec:
        """The ledger action of a certificate's export."""
        return ActionSpec(
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
            self.held(row, found)
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
                    self.held(row, again)
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
        """Export the certificate once, in the tenant's mode, and read it back."""
        spec, export = self.spec(row), CredentialExport(row, self.platform, self.book)
        sent = self.outbound.settle(spec, export)
        if sent is None:
            if not row.learner_email:
                self.park(row, NO_ADDRESS)
                return
            sent = self.outbound.send(spec, export, mode=tenant_mode(self.tenant))
        if sent.state == "dead":
            self.park(row, "its export failed every attempt: replay it with "
                           f"`followup dead-letters replay action:{spec.key}`")  # fmt: skip
        elif sent.state == "found" and sent.provider_ref is not None:  # its look-up read it
            confirm(self.ledger, spec, export, sent.provider_ref, note=FOUND)
        elif sent.state == "in_flight":
            self.counts["in_flight"] += 1
        elif sent.state == "unreadable" and sent.error is not None:
            raise sent.error  # the platform cannot tell now: left for the next run
        elif sent.state == "failed" and sent.error is not None:
            export.failed(sent)
            if self.ledger.dead(spec.key):
                self.park(row, f"its export failed every attempt: {error_text(sent.error)}")
        elif sent.state == "sent":
            self.counts["not_read_back"] += 1

    def held(self, row: CertificateRow, credential: Issued) -> None:
        """The platform holds the certificate: confirmed (an answer lost before, found)."""
        if row.state == "confirmed" and row.credential_id == credential.id:
            self.counts["held"] += 1
            return
        export = CredentialExport(row, self.platform, self.book)
        confirm(self.ledger, self.spec(row), export, credential.id)

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
