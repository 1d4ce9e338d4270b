"""Enrichment: two-line summaries of each open deal's new e-mails, hourly at :30.

Not built yet: the job runs and says so (outcome ``skipped``, reason ``not built``), so no run
claims to have summarised anything.
"""

import dagster as dg

from followup_pipeline.defs.common import RunCounts, not_built
from followup_pipeline.settings import Settings


@dg.op
def summarise_new_emails(context: dg.OpExecutionContext) -> dg.Output[RunCounts]:
    """Summarise new e-mails: not built yet, the run is ``skipped``."""
    return not_built(context, "summaries of new e-mails")


def build_defs(settings: Settings) -> dg.Definitions:
    """The ``enrich`` job and its hourly schedule in the team's time zone."""

    @dg.job(description="Summarise each open deal's new e-mails in two lines (not built yet).")
    def enrich() -> None:
        summarise_new_emails()

    enrich_hourly = dg.ScheduleDefinition(
        name="enrich_hourly",
        job=enrich,
        cron_schedule="30 * * * *",
        execution_timezone=settings.timezone,
        default_status=dg.DefaultScheduleStatus.RUNNING,
    )
    return dg.Definitions(jobs=[enrich], schedules=[enrich_hourly])
