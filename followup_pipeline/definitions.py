"""The one ``Definitions`` of the machine: every capability's jobs, schedules and sensors,
with the real resources. Secrets reach resources only through ``dg.EnvVar``."""

import dagster as dg

from followup_pipeline.defs.alerts import definitions as alerts
from followup_pipeline.defs.enrich import definitions as enrich
from followup_pipeline.defs.evaluate import definitions as evaluate
from followup_pipeline.defs.register import definitions as register
from followup_pipeline.defs.replay import definitions as replay
from followup_pipeline.defs.report import definitions as report
from followup_pipeline.resources import ClockResource, PostgresResource, SettingsResource
from followup_pipeline.settings import get_settings


def build_resources() -> dict[str, object]:
    """The production resources, configured from the environment."""
    settings = get_settings()
    return {
        "postgres": PostgresResource(url=dg.EnvVar("FOLLOWUP_DATABASE_URL")),
        "clock": ClockResource(start=settings.now.isoformat() if settings.now else None),
        "settings": SettingsResource(),
    }


defs = dg.Definitions.merge(
    register,
    evaluate,
    enrich,
    report,
    alerts,
    replay,
    dg.Definitions(resources=build_resources()),
)
