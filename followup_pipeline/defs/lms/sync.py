"""The sync of a tenant (docs/architecture.md §10): its courses' learners and quizzes become
``lms_assignments`` (a quiz with a due date, per learner), and each open assignment keeps its
reminder records, planned once per key. A due date that moved suppresses the planned reminders
of the old date (reason ``superseded``) and plans the new ones; a completion seen at a sync (or
by a send's re-check) is kept on the assignment, and no run plans anything more of it (what is
planned is suppressed, reason ``completed``, when it falls due). Records, never timers: what is
due is read from them whenever a run comes.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from followup_pipeline.defs.lms.ports import LmsSite
from followup_pipeline.domain.calendar import BusinessCalendar
from followup_pipeline.domain.reminders import ReminderPlan, plan_reminders, reminder_key
from followup_pipeline.engine.scope import Database
from followup_pipeline.integrations.errors import IntegrationError
from followup_pipeline.store import lms, lms_learners, lms_plans
from followup_pipeline.store.db import storable
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
    for every learner's completions too (the daily whole sync; a send re-checks anyway): one
    call a learner and course. Everything is read first, then written in one transaction, a
    few statements for the whole tenant (``store/lms_plans.py``)."""
    calendar, plan = tenant_calendar(tenant), tenant_plan(tenant)
    quizzes = list(
        {q.id: q for q in site.quizzes(tenant.course_ids) if q.timeclose is not None}.values()
    )
    with db.connection() as conn:
        known_done = lms_plans.completed(conn, tenant.id)
    # A quiz's plan depends on its due date alone: made once, whoever the learner.
    whole_of = {
        q.id: plan_reminders(q.timeclose, zone=tenant.time_zone, plan=plan, calendar=calendar)
        for q in quizzes
        if q.timeclose is not None
    }
    rows: list[lms_plans.Assignment] = []
    plans: list[lms_plans.Plan] = []
    planned_rows: list[lms_plans.Planned] = []
    seen: set[int] = set()
    assigned: set[tuple[int, int]] = set()  # (learner, quiz): each once, whatever Moodle lists
    completed = 0
    for course_id in dict.fromkeys(tenant.course_ids):  # (a course listed twice: read once)
        learners = list(
            {learner.id: learner for learner in site.enrolled_users(course_id)}.values()
        )
        seen.update(learner.id for learner in learners)
        course_quizzes = [q for q in quizzes if q.course == course_id]
        if not course_quizzes:
            continue
        asked = [(q.coursemodule, q.id) for q in course_quizzes]
        for learner in learners:
            done_now: set[int] = set()
            if completions:
                done_now = site.quizzes_completed(course_id, learner.id, asked)
            for quiz in course_quizzes:
                if (learner.id, quiz.id) in assigned:
                    continue
                assigned.add((learner.id, quiz.id))
                done = quiz.id in done_now
                rows.append(
                    lms_plans.Assignment(
                        learner_id=learner.id,
                        quiz_id=quiz.id,
                        course_id=course_id,
                        coursemodule=quiz.coursemodule,
                        # (names as Postgres can keep them: a NUL would fail the tenant's sync)
                        quiz_name=storable(quiz.name, 1000),
                        due_at=quiz.timeclose,
                        learner_name=storable(learner.fullname, 1000),
                        learner_email=None if learner.email is None else storable(learner.email),
                        completed_at=now if done else None,
                    )
                )
                if done or (learner.id, quiz.id) in known_done:
                    # Completed: nothing more is planned, by this run or any after it. What was
                    # planned stays on record: each is suppressed with the reason when it falls
                    # due, through the ledger like every due action.
                    completed += done
                    continue
                whole = whole_of[quiz.id]
                keys = [
                    reminder_key(tenant.id, learner.id, quiz.id, r.action_type, r.local_day)
                    for r in whole
                ]
                plans.append(lms_plans.Plan(learner.id, quiz.id, keys))
                # A quiz long closed is reminded of no more: nothing past the catch-up window is
                # planned now. One planned before stays as it is (its plan still holds it): the
                # run sees it due and suppresses it `expired`, never `superseded`.
                planned_rows += [
                    lms_plans.Planned(
                        learner_id=learner.id,
                        quiz_id=quiz.id,
                        action_type=r.action_type,
                        due_at=r.due_at,
                        time_zone=tenant.time_zone,
                        local_day=r.local_day,
                        key=key,
                    )
                    for r, key in zip(whole, keys, strict=True)
                    if r.due_at >= now - CATCH_UP
                ]
    # once a day: each learner's language and zone, as their profile says
    details = _learner_details(site, seen) if completions else None
    with db.connection() as conn, conn.transaction():
        lms_plans.save_assignments(conn, tenant.id, rows, now)
        superseded = lms_plans.drop_unplanned(conn, tenant.id, plans, reason="superseded", at=now)
        planned = lms_plans.plan(conn, tenant.id, planned_rows)
        if details is not None:
            lms_learners.save(conn, tenant.id, details, now)
        # Whatever this sync did not see (a learner gone, a quiz deleted or undated) is retired.
        superseded += lms_plans.retire_unseen(conn, tenant.id, list(assigned), now)
        if completions:
            lms.set_synced(conn, tenant.id, now)
    return Synced(len(rows), planned, superseded, completed)
