"""Moodle's course completions as certificates to export (docs/architecture.md §10): every learner
of a certified course who met its completion requirements (Moodle's course completion state) is
recorded once in ``lms_certificates``, its first generation; those recorded before are not asked
again. A course Moodle cannot report on (no criteria set, completion off) is queued with the
tenant's owner and closed when it is readable again; a learner it cannot tell is skipped and
counted, the others go on.
"""

from collections import Counter

from followup_pipeline.defs.lms.catch_up import CatchUp
from followup_pipeline.defs.lms.ports import CourseSite
from followup_pipeline.engine.scope import Database, RunScope
from followup_pipeline.integrations.errors import PermanentError
from followup_pipeline.store import lms_certificates as certs
from followup_pipeline.store.lms import Tenant
from followup_pipeline.store.lms_certificates import Completion

#: Moodle's answers that are about the whole course, not one learner.
COURSE_LEVEL = ("nocriteriaset", "cannotviewreport")


class CourseCompletions:
    """One run's reading of one tenant's completions."""

    def __init__(
        self, run: RunScope, db: Database, tenant: Tenant, site: CourseSite, queue: CatchUp,
        counts: Counter[str],
    ) -> None:  # fmt: skip
        self.run = run
        self.db = db
        self.tenant = tenant
        self.site = site
        self.queue = queue
        self.counts = counts

    def read(self, course_id: int, group_id: int, recorded: set[tuple[int, int]]) -> None:
        """Record every new learner of the course who met its completion requirements
        (``recorded``: the (course, learner) pairs on record already)."""
        key = f"lms-cert-course:{self.tenant.id}:{course_id}"
        try:
            for learner in self.site.enrolled_users(course_id):
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
            self.queue.park(key, "certificate", what, reason)
            return
        self.queue.close(key, "the course's completions are readable again")
