"""Registration: the ``crm_events`` sensor over the event log (``engine/event_sensor.py``) and the
``register`` job."""

from datetime import UTC, datetime

import dagster as dg

from followup_pipeline.defs.register.registrar import Registrar
from followup_pipeline.engine.event_sensor import events_tick
from followup_pipeline.engine.runs import RunCounts, outcome_output, time_limit
from followup_pipeline.engine.scope import RunScope
from followup_pipeline.engine.worker import EventWorker, HandlerFactory, WorkerRun, worker_outcome
from followup_pipeline.integrations.resources import EspoCrmResource
from followup_pipeline.resources import PostgresResource
from followup_pipeline.settings import Settings

#: A register run that outlives this is failed by run monitoring, so a run whose worker died can
#: never hold one of the sensor's ``REGISTER_RUNS`` places for longer.
MAX_RUNTIME_S = 30 * 60
#: The most ``register`` runs at once: what the sensor launches, and the limit dagster.yaml puts on
#: the tag below (a run retried by the daemon is a run more that the sensor did not launch). Runs
#: side by side are safe: claims are ``SKIP LOCKED`` leases, and each (event, item, step) is done
#: once. Two, not more: a second run halves a backlog (a mass edit in the CRM), a third would
#: ask the team's CRM a third time at once for a backlog that is rare, and take a run slot
#: (a process that loads the code) from the other jobs on a small host.
REGISTER_RUNS = 2
#: The run tag that dagster.yaml's limit of ``REGISTER_RUNS`` counts.
CONCURRENCY_TAG = "followup/concurrency"


@dg.op
def register_events(
    context: dg.OpExecutionContext,
    settings: dg.ResourceParam[Settings],
    postgres: PostgresResource,
    espocrm: EspoCrmResource,
) -> dg.Output[RunCounts]:
    """Claim due events in batches and open or close watches; counts as run metadata."""
    # Registration reads no instant of its own (a watch counts from its event's receipt), so the
    # job takes no clock: the scope's now is when the run started.
    scope = RunScope(datetime.now(UTC), context.run_id, context.log)
    with postgres.connection() as conn:
        run = WorkerRun(conn, postgres, scope, settings, {"espocrm": espocrm})
        counts = dict(EventWorker(conn, make_registrar(run), settings, sources=SOURCES).run())
    return outcome_output(context, worker_outcome(counts), counts)


@dg.job(
    description="Open and close watches from the CRM's webhook events.",
    tags={CONCURRENCY_TAG: "register", **time_limit(MAX_RUNTIME_S)},
    # One op: run in the run's own process, not in a step process of its own (2-4 s saved
    # between a webhook and its watch).
    executor_def=dg.in_process_executor,
)
def register() -> None:
    register_events()


def make_registrar(run: WorkerRun) -> Registrar:
    """The handler of EspoCRM's events, for the engine's worker (and a replay): it needs the
    ``espocrm`` resource."""
    espocrm = run.resources["espocrm"]
    if not isinstance(espocrm, EspoCrmResource):
        raise TypeError(f"the espocrm resource is a {type(espocrm).__name__}")
    return Registrar(run.conn, espocrm.get_client(), run.settings)


#: The sources whose events this capability handles.
EVENT_HANDLERS: dict[str, HandlerFactory] = {"espocrm": make_registrar}
SOURCES = tuple(EVENT_HANDLERS)


def crm_events_tick(
    context: dg.SensorEvaluationContext, postgres: PostgresResource, settings: Settings
) -> dg.SensorResult | dg.SkipReason:
    """Launch ``register`` when events are due and no run of it is in flight, or beside the
    runs in flight (up to ``REGISTER_RUNS``) when more are due than one batch for each."""
    return events_tick(
        context,
        postgres,
        job_name=register.name,
        sources=SOURCES,
        limit=settings.event_batch_size,
        max_in_flight=REGISTER_RUNS,
    )


def build_defs(settings: Settings) -> dg.Definitions:
    """The ``register`` job and the ``crm_events`` sensor that launches it, every
    ``FOLLOWUP_EVENTS_SENSOR_INTERVAL_S``."""

    @dg.sensor(
        job=register,
        minimum_interval_seconds=settings.events_sensor_interval_s,
        default_status=dg.DefaultSensorStatus.RUNNING,
    )
    def crm_events(
        context: dg.SensorEvaluationContext, postgres: PostgresResource
    ) -> dg.SensorResult | dg.SkipReason:
        """Launch ``register`` when events are due, up to ``REGISTER_RUNS`` runs at once."""
        return crm_events_tick(context, postgres, settings)

    return dg.Definitions(jobs=[register], sensors=[crm_events], resources={"settings": settings})
