"""Enrichment: two-line summaries of each open deal's new e-mails, hourly at :30."""

import dagster as dg

from followup_pipeline.defs.common import RunCounts, outcome_output
from followup_pipeline.settings import get_settings


@dg.op
def summarise_new_emails(context: dg.OpExecutionContext) -> dg.Output[RunCounts]:
    """Summarise new e-mails (lands with the enrichment issue)."""
    return outcome_output(context, "ok", {"summarised": 0})


@dg.job(description="Summarise each open deal's new e-mails in two lines.")
def enrich() -> None:
    summarise_new_emails()


enrich_hourly = dg.ScheduleDefinition(
    name="enrich_hourly",
    job=enrich,
    cron_schedule="30 * * * *",
    execution_timezone=get_settings().timezone,
)

definitions = dg.Definitions(jobs=[enrich], schedules=[enrich_hourly])
