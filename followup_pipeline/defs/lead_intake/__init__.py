"""Lead intake (docs/architecture.md §9): the site form's and the payment provider's webhooks and
the nightly CRM sweep become one lead per person.

- ``lead_events``, a sensor over the event log (``engine/event_sensor.py``), launches
  ``lead_intake`` when events of the lead sources are due; its steps ``normalise``
  (``normalise.py``), ``enrich`` (``enrich.py``), ``classify`` (``classify.py``) and ``crm_upsert``
  (``upsert.py``, the one write to the CRM, or in shadow mode the record of it, sent the engine's
  one way with its CRM part in ``crm_sender.py``) run on the engine's event worker, each handler
  with the run's database and scope (its now, its id, its log): completion keys
  ``{event_id}:0:{step}``, ``FOLLOWUP_LEAD_MAX_RETRIES`` retries after the first attempt with
  backoff and jitter, then a dead letter that ``followup dead-letters`` lists and replays by the
  original id. Each run reads lead intake's mode (``store/lead_mode.py``:
  shadow until a person runs ``followup leads go-live``) and carries it as the tag
  ``followup/lead_mode``.
- ``crm_changes``, every night at ``FOLLOWUP_CRM_CHANGES_AT`` in the team's time zone, stores
  the CRM's Leads changed since its cursor as events (``sweep.py``).
"""

import dagster as dg

from followup_pipeline.defs.lead_intake.normalise import make_normaliser
from followup_pipeline.defs.lead_intake.sweep import sweep
from followup_pipeline.engine.event_sensor import events_tick
from followup_pipeline.engine.runs import RunCounts, outcome_output, time_limit
from followup_pipeline.engine.scope import RunScope
from followup_pipeline.engine.worker import (
    EventWorker,
    HandlerFactory,
    WorkerRun,
    worker_outcome,
)
from followup_pipeline.integrations.resources import (
    CompanyLookupResource,
    EspoCrmResource,
    MistralResource,
)
from followup_pipeline.resources import ClockResource, PostgresResource
from followup_pipeline.settings import LEAD_SOURCES, Settings

#: A lead_intake run that outlives this is failed by run monitoring (the sensor waits while one
#: is in flight).
MAX_RUNTIME_S = 30 * 60

#: The run's tag of lead intake's mode: ``shadow`` (nothing written to the CRM) or ``live``.
MODE_TAG = "followup/lead_mode"

#: The sources whose events this capability handles.
EVENT_HANDLERS: dict[str, HandlerFactory] = dict.fromkeys(LEAD_SOURCES, make_normaliser)


@dg.op
def normalise_leads(
    context: dg.OpExecutionContext,
    settings: dg.ResourceParam[Settings],
    postgres: PostgresResource,
    company_lookup: CompanyLookupResource,
    mistral: MistralResource,
    espocrm: EspoCrmResource,
    clock: ClockResource,
) -> dg.Output[RunCounts]:
    """Claim due events of the lead sources and take each through its steps (normalise,
    enrich, classify, crm_upsert); counts as metadata."""
    resources = {
        "company_lookup": company_lookup,
        "mistral": mistral,
        "espocrm": espocrm,
        "clock": clock,
    }
    scope = RunScope(clock.now(), context.run_id, context.log)
    with postgres.connection() as conn:
        handler = make_normaliser(WorkerRun(conn, postgres, scope, settings, resources))
        if handler.mode is not None:
            context.instance.add_run_tags(context.run_id, {MODE_TAG: handler.mode.mode})
            context.log.info("lead intake %s (%s)", handler.mode.mode, handler.mode.why)
        counts = dict(EventWorker(conn, handler, settings, sources=LEAD_SOURCES).run())
    for warning in handler.warnings:
        context.log.warning(warning)
    used = handler.crm_modes()
    if handler.mode is not None and used and used != {handler.mode.mode}:
        # Switched while the run went: its writes were made in both modes (counts say how many).
        context.instance.add_run_tags(context.run_id, {MODE_TAG: "+".join(sorted(used))})
    return outcome_output(context, worker_outcome(counts), counts)


@dg.job(
    description="Take in leads from the site form, payments and the CRM sweep: one per person.",
    tags=time_limit(MAX_RUNTIME_S),
    executor_def=dg.in_process_executor,
)
def lead_intake() -> None:
    normalise_leads()


@dg.op
def sweep_crm_leads(
    context: dg.OpExecutionContext,
    postgres: PostgresResource,
    espocrm: EspoCrmResource,
    clock: ClockResource,
) -> dg.Output[RunCounts]:
    """Store the CRM's Leads changed since the cursor as ``crm-changes`` events."""
    run = RunScope(clock.now(), context.run_id, context.log)
    swept = sweep(run, postgres, espocrm.get_client())
    clean = swept.complete and not swept.tally.problems
    return outcome_output(
        context,
        "ok" if clean else "partial",
        swept.tally.metadata(),
        degraded=swept.tally.degraded(),
    )


@dg.job(
    description="Store the CRM's Leads changed since the last sweep as lead intake events.",
    executor_def=dg.in_process_executor,
    tags=time_limit(MAX_RUNTIME_S),
)
def crm_changes() -> None:
    sweep_crm_leads()


def build_defs(settings: Settings) -> dg.Definitions:
    """The ``lead_intake`` job with its ``lead_events`` sensor, and the ``crm_changes`` job with
    its nightly schedule (in the team's time zone)."""

    @dg.sensor(
        job=lead_intake,
        minimum_interval_seconds=settings.events_sensor_interval_s,
        default_status=dg.DefaultSensorStatus.RUNNING,
    )
    def lead_events(
        context: dg.SensorEvaluationContext, postgres: PostgresResource
    ) -> dg.SensorResult | dg.SkipReason:
        """Launch ``lead_intake`` when lead events are due and no run of it is in flight."""
        return events_tick(
            context,
            postgres,
            job_name=lead_intake.name,
            sources=LEAD_SOURCES,
            limit=settings.event_batch_size,
        )

    at = settings.crm_changes_at
    crm_changes_nightly = dg.ScheduleDefinition(
        name="crm_changes_nightly",
        job=crm_changes,
        cron_schedule=f"{at.minute} {at.hour} * * *",
        execution_timezone=settings.timezone,
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description="Every night: the CRM's Leads changed since the last sweep.",
    )
    return dg.Definitions(
        jobs=[lead_intake, crm_changes],
        sensors=[lead_events],
        schedules=[crm_changes_nightly],
        resources={"settings": settings},
    )
