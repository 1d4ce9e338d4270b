"""Learning reminders (docs/architecture.md §10): an academy's quiz reminders from its Moodle,
per tenant and time zone, as durable records that survive a restart.

- ``lms_reminders`` runs every 15 minutes on one schedule (tenants live in a table, so the
  schedule does not depend on them). For each tenant not ``off``: a sync of its courses'
  learners and quizzes into assignments and planned reminder records (``sync.py``; Moodle's
  completions too once a day), then, in the tenant's business hours, every reminder due by now:
  re-checked, then sent once through the engine's one way out (``engine/effects.py``) or
  suppressed with the reason (``remind.py``; by mail or Moodle's message:
  ``reminder_delivery.py``). A tenant whose Moodle or mailbox fails is counted and left for the
  next run; the others go on.
- The same run publishes each tenant's content that is due, approved and current
  (``publish.py``; Moodle's part: ``module_publication.py``), and, once an hour per tenant,
  reconciles its certificates: Moodle's course completions (``course_completions.py``) against
  what the credential platform confirms (``certify.py``; the export: ``credential_export.py``).
  What can be neither done nor suppressed goes to the catch-up queue with the tenant's owner
  (``catch_up.py``); a tenant's mode as a send's, and what a read-back after the send records:
  ``outbound.py``.
- ``lms_weekly``, Monday 07:00 in the team's zone: each tenant's reminders by outcome in one
  mail to the academy's owner and backup, once per tenant and ISO week.
"""

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import fields
from datetime import datetime, timedelta

import dagster as dg

from followup_pipeline.defs.lms.catch_up import CatchUp
from followup_pipeline.defs.lms.certify import CHECK_EVERY, certify_tenant
from followup_pipeline.defs.lms.publish import publish_tenant
from followup_pipeline.defs.lms.remind import Channel, remind_tenant
from followup_pipeline.defs.lms.sync import sync_tenant
from followup_pipeline.domain.academy_mail import Rendered, WeekCounts, render_weekly
from followup_pipeline.domain.academy_words import language_of
from followup_pipeline.engine.mailer import Mailer
from followup_pipeline.engine.runs import (
    SINGLETON_TAG,
    Outcome,
    RunCounts,
    outcome_output,
    time_limit,
)
from followup_pipeline.engine.scope import RunScope, Tally
from followup_pipeline.integrations.errors import IntegrationError
from followup_pipeline.integrations.resources import (
    AccredibleResource,
    MoodleResource,
    OutlookResource,
)
from followup_pipeline.resources import ClockResource, PostgresResource
from followup_pipeline.settings import Settings
from followup_pipeline.store import links, lms

#: A hung run is failed after this many seconds (run monitoring, dagster.yaml).
MAX_RUNTIME_S = 14 * 60
#: The owners' weekly mails: one per academy.
WEEKLY_MAX_RUNTIME_S = 30 * 60
#: How often a tenant's completions are all read again (a send re-checks its own anyway).
WHOLE_SYNC_EVERY = timedelta(hours=24)
#: How long the ingress has to apply a click it stored before a run applies it instead.
CLICK_SETTLES = timedelta(seconds=30)
#: What makes a tenant unreachable for one run (its Moodle, its key, its calendar's country):
#: counted and left for the next run, the other tenants go on.
TENANT_ERRORS = (IntegrationError, KeyError, NotImplementedError)


def each_tenant(
    context: dg.OpExecutionContext,
    tenants: Sequence[lms.Tenant],
    work: Callable[[lms.Tenant], Counter[str]],
    unreachable: Callable[[lms.Tenant, Exception], int] | None = None,
) -> tuple[Counter[str], Tally]:
    """``work`` for each tenant, its counts prefixed with the tenant; a tenant it cannot reach
    (``TENANT_ERRORS``) is counted ``unreachable`` and left for the next run, the others go on.
    ``unreachable`` parks what is late of such a tenant (its count: ``late_parked``).
    The counts, and the problems (each unreachable tenant, counted against its vendor)."""
    counts: Counter[str] = Counter()
    tally = Tally(context.log)
    for tenant in tenants:
        try:
            for name, value in work(tenant).items():
                counts[f"{tenant.id}:{name}"] += value
        except TENANT_ERRORS as error:
            # NotImplementedError: the holidays package knows no such country (a tenant's typo).
            tally.problem(
                f"tenant {tenant.id}: {error}; left for the next run", error, item=tenant.id
            )
            counts[f"{tenant.id}:unreachable"] += 1
            if unreachable is not None:
                counts[f"{tenant.id}:late_parked"] += unreachable(tenant, error)
    return counts, tally


def note_reach(
    postgres: PostgresResource, tenant: lms.Tenant, now: datetime, error: Exception | None
) -> None:
    """Record that a run reached the tenant's Moodle (``error`` None), or could not: what
    ``followup lms status`` and ``doctor`` say. Another vendor's error (the credential
    platform's, the mailbox's) says nothing of Moodle."""
    moodle = getattr(error, "vendor", None) == "moodle" or (
        isinstance(error, KeyError) and "Moodle token" in str(error)  # (no token: no Moodle)
    )
    if error is not None and not moodle:
        return
    with postgres.connection() as conn:
        lms.set_reached(conn, tenant.id, now, None if error is None else str(error))


def tenants_output(
    context: dg.OpExecutionContext, counts: Counter[str], problems: int, degraded: str | None
) -> dg.Output[RunCounts]:
    """The run's outcome: ``partial``, saying which vendor left which tenants (``degraded``),
    when a tenant could not be reached."""
    outcome: Outcome = "partial" if problems else "ok"
    return outcome_output(context, outcome, dict(counts), degraded=degraded)


@dg.op
def remind_learners(
    context: dg.OpExecutionContext,
    settings: dg.ResourceParam[Settings],
    postgres: PostgresResource,
    moodle: MoodleResource,
    outlook: OutlookResource,
    clock: ClockResource,
) -> dg.Output[RunCounts]:
    """Sync each tenant, then send or suppress what is due in its zone and business hours."""
    run = RunScope(clock.now(), context.run_id, context.log)
    with postgres.connection() as conn:
        tenants = [t for t in lms.tenants(conn) if t.mode != "off"]
        # A learner's click the ingress stored but did not apply (it died, the database went
        # away): applied now, before any reminder is re-checked.
        clicks = links.apply_pending(conn, older_than=run.now - CLICK_SETTLES)
    for error in clicks.errors:
        context.log.warning("a stored click could not be applied: %s", error)

    def remind(tenant: lms.Tenant) -> Counter[str]:
        site = moodle.site(tenant.moodle_url, tenant.token_ref)
        whole = tenant.synced_at is None or run.now - tenant.synced_at >= WHOLE_SYNC_EVERY
        synced = sync_tenant(postgres, tenant, site, now=run.now, completions=whole)
        note_reach(postgres, tenant, run.now, None)  # (a sync reads its Moodle, every time)
        mail = outlook.client_for(tenant.sender) if tenant.channel == "email" else None
        channel = Channel(site=site, mailbox=mail)
        done = remind_tenant(run, postgres, tenant, channel, settings)
        done["planned"] += synced.planned
        done["superseded_plans"] += synced.superseded
        done["completed_seen"] += synced.completed
        return done

    def late(tenant: lms.Tenant, error: Exception) -> int:
        note_reach(postgres, tenant, run.now, error)
        return CatchUp(postgres, tenant, settings, run.now).park_late(error)

    counts, tally = each_tenant(context, tenants, remind, late)
    counts["tenants"] = len(tenants)
    counts["link_clicks_applied"] = clicks.applied
    counts["link_clicks_failed"] = len(clicks.errors)
    return tenants_output(context, counts, len(tally.problems), tally.degraded())


@dg.op
def publish_content(
    context: dg.OpExecutionContext,
    settings: dg.ResourceParam[Settings],
    postgres: PostgresResource,
    moodle: MoodleResource,
    clock: ClockResource,
) -> dg.Output[RunCounts]:
    """Each tenant's content due now: published once if approved and current, else held with
    the reason (and queued with the owner)."""
    run = RunScope(clock.now(), context.run_id, context.log)
    with postgres.connection() as conn:
        tenants = [t for t in lms.tenants(conn) if t.mode != "off"]

    def publish(tenant: lms.Tenant) -> Counter[str]:
        site = moodle.site(tenant.moodle_url, tenant.token_ref)
        return publish_tenant(run, postgres, tenant, site, settings)

    def late(tenant: lms.Tenant, error: Exception) -> int:
        note_reach(postgres, tenant, run.now, error)
        return CatchUp(postgres, tenant, settings, run.now).park_late_publications(error)

    counts, tally = each_tenant(context, tenants, publish, late)
    return tenants_output(context, counts, len(tally.problems), tally.degraded())


@dg.op
def reconcile_certificates(
    context: dg.OpExecutionContext,
    settings: dg.ResourceParam[Settings],
    postgres: PostgresResource,
    moodle: MoodleResource,
    accredible: AccredibleResource,
    clock: ClockResource,
) -> dg.Output[RunCounts]:
    """Once an hour per tenant that certifies courses: Moodle's completions against what the
    credential platform holds; what is missing issued and read back."""
    run = RunScope(clock.now(), context.run_id, context.log)
    with postgres.connection() as conn:
        certifying = [
            t
            for t in lms.tenants(conn)
            if t.mode != "off" and t.credential_groups and t.credential_token_ref
        ]
    due = [
        t
        for t in certifying
        if t.certificates_checked_at is None or run.now - t.certificates_checked_at >= CHECK_EVERY
    ]

    def certify(tenant: lms.Tenant) -> Counter[str]:
        assert tenant.credential_token_ref is not None  # filtered above
        site = moodle.site(tenant.moodle_url, tenant.token_ref)
        platform = accredible.account(tenant.credential_token_ref)
        return certify_tenant(run, postgres, tenant, site, platform, settings)

    def late(tenant: lms.Tenant, error: Exception) -> int:
        note_reach(postgres, tenant, run.now, error)
        return CatchUp(postgres, tenant, settings, run.now).park_late_certificates(error)

    counts, tally = each_tenant(context, due, certify, late)
    for tenant in certifying:
        if tenant not in due:
            counts[f"{tenant.id}:checked_lately"] += 1
    return tenants_output(context, counts, len(tally.problems), tally.degraded())


@dg.job(
    description=(
        "Learning reminders: sync each tenant's Moodle, send what is due, publish approved "
        "content, reconcile certificates; each once."
    ),
    tags={SINGLETON_TAG: "lms_reminders", **time_limit(MAX_RUNTIME_S)},
    executor_def=dg.in_process_executor,
)
def lms_reminders() -> None:
    remind_learners()
    publish_content()
    reconcile_certificates()


def weekly_mail(row: lms.TenantStatus, tenant: lms.Tenant, week: str, until: datetime) -> Rendered:
    """A tenant's weekly mail to the academy's owner, in its language (``academy_weekly``)."""
    counts = WeekCounts(**{f.name: getattr(row, f.name) for f in fields(WeekCounts)})
    return render_weekly(
        academy=tenant.name, language=language_of(tenant.language), zone=tenant.time_zone,
        week=week, dry=tenant.mode == "dry", counts=counts, until=until,
    )  # fmt: skip


@dg.op
def mail_academy_owners(
    context: dg.OpExecutionContext,
    settings: dg.ResourceParam[Settings],
    postgres: PostgresResource,
    outlook: OutlookResource,
    clock: ClockResource,
) -> dg.Output[RunCounts]:
    """Each tenant's week in one mail to its owner (and backup), once per tenant and week."""
    run = RunScope(clock.now(), context.run_id, context.log)
    year, week_no, _ = run.now.isocalendar()
    week = f"{year}-W{week_no:02d}"
    counts: Counter[str] = Counter()
    with postgres.connection() as conn:
        tenants = {t.id: t for t in lms.tenants(conn)}
        rows = lms.status(conn, run.now, since=run.now - lms.STATUS_WINDOW)
    mailer = Mailer(run, postgres, outlook.get_client(), settings)
    for row in rows:
        tenant = tenants[row.tenant_id]
        to = [a for a in (tenant.owner, tenant.backup) if a]
        if not to or tenant.mode == "off":
            counts["no_owner" if not to else "off"] += 1
            continue
        mail = weekly_mail(row, tenant, week, run.now)
        result = mailer.send_once(
            key=f"lms:weekly:{tenant.id}:{week}", kind="report", to=to, subject=mail.subject,
            html=mail.html, text=mail.text,
        )  # fmt: skip
        counts[result.outcome] += 1
    return outcome_output(context, "ok", dict(counts))


@dg.job(
    description="Each academy's week of learning reminders, mailed to its owner once.",
    executor_def=dg.in_process_executor,
    tags=time_limit(WEEKLY_MAX_RUNTIME_S),
)
def lms_weekly() -> None:
    mail_academy_owners()


def build_defs(settings: Settings) -> dg.Definitions:
    """The ``lms_reminders`` job and its schedule, every 15 minutes; ``lms_weekly`` on Monday
    mornings (the team's zone)."""
    every_15_min = dg.ScheduleDefinition(
        name="lms_reminders_every_15_min",
        job=lms_reminders,
        cron_schedule="*/15 * * * *",
        # Every quarter hour is the same instants in any zone; each tenant's own zone decides
        # what is due.
        execution_timezone=settings.timezone,
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description="Every 15 minutes: each tenant's due reminders, in its own zone and hours.",
    )
    weekly = dg.ScheduleDefinition(
        name="lms_weekly_monday",
        job=lms_weekly,
        cron_schedule="0 7 * * 1",
        execution_timezone=settings.timezone,
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description="Monday 07:00: each academy's week of reminders to its owner.",
    )
    return dg.Definitions(
        jobs=[lms_reminders, lms_weekly],
        schedules=[every_15_min, weekly],
        resources={"settings": settings},
    )
