"""The one ``Definitions`` of the machine: every capability's jobs, schedules and sensors,
with the real resources. Secrets reach resources only through ``dg.EnvVar``."""

import dagster as dg

# Modules, not their ``definitions``: Dagster refuses a module with two Definitions at top level.
from followup_pipeline.defs import (
    alerts,
    enrich,
    evaluate,
    register,
    replay,
    report,
    watch_control,
)
from followup_pipeline.defs.evaluate.lock import RunLockResource
from followup_pipeline.integrations.resources import (
    ClickUpResource,
    EspoCrmResource,
    MistralResource,
    OutlookResource,
)
from followup_pipeline.resources import ClockResource, PostgresResource, SettingsResource
from followup_pipeline.settings import export_secrets, get_settings


def build_resources() -> dict[str, object]:
    """The production resources: plain settings as values, secrets through ``dg.EnvVar``."""
    settings = get_settings()
    export_secrets(settings)
    hmac = dg.EnvVar("FOLLOWUP_ESPOCRM_HMAC_SECRET") if settings.espocrm_hmac_secret else None
    return {
        "postgres": PostgresResource(url=dg.EnvVar("FOLLOWUP_DATABASE_URL")),
        "clock": ClockResource(start=settings.now.isoformat() if settings.now else None),
        "settings": SettingsResource(),
        "evaluate_lock": RunLockResource(url=dg.EnvVar("FOLLOWUP_DATABASE_URL"), name="evaluate"),
        "espocrm": EspoCrmResource(
            base_url=str(settings.espocrm_url),
            api_key=dg.EnvVar("FOLLOWUP_ESPOCRM_API_KEY"),
            hmac_secret=hmac,
        ),
        "clickup": ClickUpResource(
            base_url=str(settings.clickup_url),
            token=dg.EnvVar("FOLLOWUP_CLICKUP_TOKEN"),
            list_id=settings.clickup_list_id,
            key_field_id=settings.clickup_key_field_id,
            closed_status=settings.clickup_closed_status,
        ),
        "outlook": OutlookResource(
            login_url=str(settings.graph_login_url),
            graph_url=str(settings.graph_url),
            tenant_id=settings.graph_tenant_id,
            client_id=settings.graph_client_id,
            client_secret=dg.EnvVar("FOLLOWUP_GRAPH_CLIENT_SECRET"),
            sender=settings.graph_sender,
        ),
        "mistral": MistralResource(
            base_url=str(settings.mistral_url),
            api_key=dg.EnvVar("FOLLOWUP_MISTRAL_API_KEY"),
            model=settings.mistral_model,
        ),
    }


defs = dg.Definitions.merge(
    register.definitions,
    evaluate.definitions,
    enrich.definitions,
    report.definitions,
    alerts.definitions,
    replay.definitions,
    watch_control.definitions,
    dg.Definitions(resources=build_resources()),
)
