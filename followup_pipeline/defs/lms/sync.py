"""The sync of a tenant (docs/architecture.md §10): its courses' learners and quizzes become
``lms_assignments`` (a quiz with a due date, per learner), and each open assignment keeps its
reminder records, planned once per key. A due date that moved suppresses the planned reminders
of the old date (reason ``superseded``) and plans the new ones; a completion seen at a sync is
kept on the assignment, and plans nothing more (what is planned is suppressed, reason
``completed``, when it falls due). Records, never timers: what is due is read from them whenever
a run comes.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from followup_pipeline.defs.lms.ports import LmsSite
from followup_pipeline.domain.calendar import BusinessCalendar
from followup_pipeline.domain.reminders import ReminderPlan, plan_reminders, reminder_key
from followup_pipeline.engine.scope import Database
from followup_pipeline.integrations.errors import IntegrationError
from followup_pipeline.store import lms, lms_learners
from followup_pipeline.store.lms import Tenant
from followup_pipeline.store.lms_learners import LearnerDetails

#: How far back a reminder is still worth sending: one due longer ago (a machine down for more
#: than a week, a course added with a quiz long closed) is not sent (``expired``).
CATCH_UP = timedelta(days=7)


@dataclass(frozen=True)
class Synced:
    """What one sync of a tenant did."""

    assignments: int
    planned: int
    superseded: int
    completed: int


def tenant_calendar(tenant: Tenant) -> BusinessCalendar:
    """The tenant's business calendar (its country's and region's public holidays)."""
    return BusinessCalendar(tenant.holiday_country, tenant.holiday_subdivision)


def tenant_plan(tenant: Tenant) -> ReminderPlan:
    """The tenant's reminder plan."""
    return ReminderPlan(
        before_days=tenant.before_days,
        after_business_days=tenant.after_business_days,
        at=tenant.remind_at,
    )


def _learner_details(site: LmsSite, ids: set[int]) -> list[LearnerDetails]:
    """The learners' language and zone from their Moodle profiles; none when Moodle will not
    say (the function not in the service, or no right to see them): the academy's apply."""
    try:
        profiles = site.users(sorted(ids))
    except IntegrationError:  # optional: tomorrow's sync asks again
        return []
    return [LearnerDetails(p.id, p.language, p.zone) for p in profiles]


def sync_tenant(
    db: Database, tenant: Tenant, site: LmsSite, *, now: datetime, completions: bool
) -> Synced:
    """Read the tenant's courses and plan their reminders; with ``completions``, ask Moodle
    for every learner's completion too (the daily whole sync; a send re-checks anyway)."""
    calendar, plan = tenant_calendar(tenant), tenant_plan(tenant)
    quizzes = [q for q in site.quizzes(tenant.course_ids) if q.timeclose is not None]
    assignments = planned = superseded = completed = 0
    seen: set[int] = set()
    for course_id in tenant.course_ids:
        learners = site.enrolled_users(course_id)
        seen.update(learner.id for learner in learners)
        for quiz in (q for q in quizzes if q.course == course_id):
            for learner in learners:
                done = completions and site.quiz_completed(
                    course_id, learner.id, quiz.coursemodule, quiz.id
                )
                row = lms.Assignment(
                    tenant_id=tenant.id,
                    learner_id=learner.id,
                    quiz_id=quiz.id,
                    course_id=course_id,
                    coursemodule=quiz.coursemodule,
                    quiz_name=quiz.name,
                    due_at=quiz.timeclose,
                    synced_at=now,
                    learner_name=learner.fullname,
                    learner_email=learner.email,
                    completed_at=now if done else None,
                )
                due_at = quiz.timeclose
                assert due_at is not None  # filtered above
                whole = plan_reminders(due_at, zone=tenant.time_zone, plan=plan, calendar=calendar)
                keys_of_plan = [
                    reminder_key(tenant.id, learner.id, quiz.id, r.action_type, r.local_day)
                    for r in whole
                ]
                # A quiz long closed is reminded of no more: nothing past the catch-up window is
                # planned now. One planned before stays as it is (its plan still holds it): the
                # run sees it due and suppresses it `expired`, never `superseded`.
                fresh = [
                    (r, key)
                    for r, key in zip(whole, keys_of_plan, strict=True)
                    if r.due_at >= now - CATCH_UP
                ]
                reminders = [r for r, _ in fresh]
                keys = [key for _, key in fresh]
                with db.connection() as conn, conn.transaction():
                    lms.save_assignment(conn, row)
                    assignments += 1
                    if done:
                        # Its planned reminders stay on record: each is suppressed with the
                        # reason when it falls due, through the ledger like every due action.
                        completed += 1
                        continue
                    superseded += lms.drop_unplanned(
                        conn, tenant.id, learner.id, quiz.id, keep=keys_of_plan,
                        reason="superseded", at=now,
                    )  # fmt: skip
                    planned += lms.plan(
                        conn,
                        [
                            lms.Planned(
                                tenant_id=tenant.id,
                                learner_id=learner.id,
                                quiz_id=quiz.id,
                                action_type=r.action_type,
                                due_at=r.due_at,
                                time_zone=tenant.time_zone,
                                local_day=r.local_day,
                                key=key,
                            )
                            for r, key in zip(reminders, keys, strict=True)
                        ],
                    )
    if completions:  # once a day: each learner's language and zone, as their profile says
        details = _learner_details(site, seen)
        with db.connection() as conn, conn.transaction():
            lms_learners.save(conn, tenant.id, details, now)
    with db.connection() as conn, conn.transaction():
        # Whatever this sync did not see (a learner gone, a quiz deleted or undated) is retired.
        superseded += lms.retire_unassigned(conn, tenant.id, now)
        if completions:
            lms.set_synced(conn, tenant.id, now)
    return Synced(assignments, planned, superseded, completed)
