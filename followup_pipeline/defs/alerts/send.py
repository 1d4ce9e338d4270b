"""The ``alert`` job: each alert of its config goes to the operations owner and backup by mail,
or as a task in the operations list in ClickUp when mail fails."""

import dagster as dg

from followup_pipeline.defs.alerts.board import AlertNotSent
from followup_pipeline.defs.alerts.delivery import AlertDelivery, Delivered
from followup_pipeline.engine.runs import RunCounts, outcome_output, time_limit
from followup_pipeline.engine.scope import RunScope
from followup_pipeline.integrations.resources import ClickUpResource, OutlookResource
from followup_pipeline.resources import ClockResource, PostgresResource
from followup_pipeline.settings import Settings

ALERT_JOB = "alert"
#: An alert run that outlives this is failed (and the failure, in turn, raises an alert).
MAX_RUNTIME_S = 15 * 60


class AlertConfig(dg.Config):
    """``alert_keys``: the ledger keys of the alerts to send (``followup alerts list``)."""

    alert_keys: list[str]


@dg.op
def send_alerts(
    context: dg.OpExecutionContext,
    config: AlertConfig,
    settings: dg.ResourceParam[Settings],
    postgres: PostgresResource,
    outlook: OutlookResource,
    ops_clickup: ClickUpResource,
    clock: ClockResource,
) -> dg.Output[RunCounts]:
    """Send each alert of ``alert_keys`` by mail, or as a ClickUp task when mail fails."""
    board = ops_clickup.get_client() if settings.ops_clickup_list_id else None
    run = RunScope(clock.now(), context.run_id, context.log)
    delivery = AlertDelivery(run, postgres, outlook.get_client(), board, settings)
    done: list[Delivered] = []
    failed: list[str] = []
    for key in config.alert_keys:
        try:
            done.append(delivery.deliver(key))
        except AlertNotSent as error:
            context.log.error(str(error))
            failed.append(str(error))
    counts: RunCounts = {
        "mailed": sum(d.channel == "mail" for d in done),
        "clickup": sum(d.channel == "clickup" for d in done),
        "in_flight": sum(d.channel == "in_flight" for d in done),
        "suppressed_dry_run": sum(d.channel == "suppressed" for d in done),
        "items_closed": sum(d.channel == "items_closed" for d in done),
        "owner_mail_failed": sum(bool(d.owner_failed) for d in done),
        "not_sent": len(failed),
    }
    if failed:
        raise dg.Failure(
            description="; ".join(failed),
            metadata={key: dg.MetadataValue.int(int(v)) for key, v in counts.items()},
        )
    if counts["clickup"] or counts["in_flight"] or counts["owner_mail_failed"]:
        return outcome_output(context, "partial", counts)
    return outcome_output(context, "ok", counts)


@dg.job(
    name=ALERT_JOB,
    description="Sends alerts to the operations owner and backup (ClickUp when mail fails).",
    tags=time_limit(MAX_RUNTIME_S),
)
def alert() -> None:
    send_alerts()
