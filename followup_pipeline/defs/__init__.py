"""One folder per capability (register, evaluate, enrich, report, alerts, replay, watch_control,
lead_intake, lms);
each keeps its ops (and its jobs, where nothing of them depends on the settings) at module level,
and has a ``build_defs(settings)`` that makes what Dagster needs at load time (partitions,
schedules, sensors) and binds the one ``Settings`` as the ``settings`` resource that ops receive.
A capability imports the engine, never another capability. ``build_definitions`` merges them
with the real resources, and gathers the capabilities' event handlers into the
``event_handlers`` resource (a replay handles any source's event); it reads nothing itself
(``definitions.py`` reads the settings).

Secrets reach resources only through ``dg.EnvVar``.
"""

import warnings

import dagster as dg

from followup_pipeline.defs import (
    alerts,
    enrich,
    evaluate,
    housekeeping,
    lead_intake,
    lms,
    register,
    replay,
    report,
    watch_control,
)
from followup_pipeline.engine.worker import EventHandlers
from followup_pipeline.integrations.resources import (
    AccredibleResource,
    ClickUpResource,
    CompanyLookupResource,
    EspoCrmResource,
    MistralResource,
    MoodleResource,
    OutlookResource,
)
from followup_pipeline.resources import ClockResource, PostgresResource, RunLockResource
from followup_pipeline.settings import Settings

# Dagster's run-failure sensor passes its own beta parameter `owners` on when the definitions are
# resolved; we set no owners. Silenced by its text and category, nothing broader.
warnings.filterwarnings(
    "ignore", message="Parameter `owners` of initializer `SensorDefinition", category=dg.BetaWarning
)

#: Every capability folder; each builds its own Definitions from the one Settings.
CAPABILITIES = (
    register,
    evaluate,
    enrich,
    report,
    alerts,
    replay,
    watch_control,
    lead_intake,
    lms,
    housekeeping,
)
#: The handler of each event source, from the capabilities that consume events.
EVENT_HANDLERS = EventHandlers({**register.EVENT_HANDLERS, **lead_intake.EVENT_HANDLERS})


def build_resources(settings: Settings) -> dict[str, object]:
    """The production resources: plain settings as values, secrets through ``dg.EnvVar``."""
    postgres = PostgresResource(url=dg.EnvVar("FOLLOWUP_DATABASE_URL"))
    hmac = dg.EnvVar("FOLLOWUP_ESPOCRM_HMAC_SECRET") if settings.espocrm_hmac_secret else None
    resources: dict[str, object] = {
        "settings": settings,
        "event_handlers": EVENT_HANDLERS,
        "postgres": postgres,
        "clock": ClockResource(start=settings.now.isoformat() if settings.now else None),
        "evaluate_lock": RunLockResource(postgres=postgres, name="evaluate"),
        "espocrm": EspoCrmResource(
            timeout_s=settings.vendor_timeout_s,
            connect_timeout_s=settings.vendor_connect_timeout_s,
            base_url=str(settings.espocrm_url),
            api_key=dg.EnvVar("FOLLOWUP_ESPOCRM_API_KEY"),
            hmac_secret=hmac,
        ),
        "clickup": ClickUpResource(
            timeout_s=settings.vendor_timeout_s,
            connect_timeout_s=settings.vendor_connect_timeout_s,
            base_url=str(settings.clickup_url),
            token=dg.EnvVar("FOLLOWUP_CLICKUP_TOKEN"),
            list_id=settings.clickup_list_id,
            key_field_id=settings.clickup_key_field_id,
            closed_status=settings.clickup_closed_status,
        ),
        # The operations list, where alerts go when mail fails (unset: a placeholder the alert
        # job never uses).
        "ops_clickup": ClickUpResource(
            timeout_s=settings.vendor_timeout_s,
            connect_timeout_s=settings.vendor_connect_timeout_s,
            base_url=str(settings.clickup_url),
            token=dg.EnvVar("FOLLOWUP_CLICKUP_TOKEN"),
            list_id=settings.ops_clickup_list_id or "unset",
        ),
        "outlook": OutlookResource(
            timeout_s=settings.vendor_timeout_s,
            connect_timeout_s=settings.vendor_connect_timeout_s,
            login_url=str(settings.graph_login_url),
            graph_url=str(settings.graph_url),
            tenant_id=settings.graph_tenant_id,
            client_id=settings.graph_client_id,
            client_secret=dg.EnvVar("FOLLOWUP_GRAPH_CLIENT_SECRET"),
            sender=settings.graph_sender,
        ),
        "mistral": MistralResource(
            timeout_s=settings.vendor_timeout_s,
            connect_timeout_s=settings.vendor_connect_timeout_s,
            base_url=str(settings.mistral_url),
            api_key=dg.EnvVar("FOLLOWUP_MISTRAL_API_KEY"),
            model=settings.mistral_model,
        ),
    }
    # The lookup is optional: without a key the resource is bound with none, and lead intake does
    # no lookup (settings say so; a dg.EnvVar of an unset variable would fail every run).
    key = dg.EnvVar("FOLLOWUP_COMPANY_LOOKUP_API_KEY") if settings.company_lookup_api_key else ""
    resources["company_lookup"] = CompanyLookupResource(
        timeout_s=settings.vendor_timeout_s,
        connect_timeout_s=settings.vendor_connect_timeout_s,
        base_url=str(settings.company_lookup_url),
        api_key=key,
    )
    # The tenants' Moodle tokens, a secret like the others (none: no tenant can be reached).
    tokens = dg.EnvVar("FOLLOWUP_LMS_TOKENS") if settings.lms_tokens else "{}"
    resources["moodle"] = MoodleResource(
        tokens=tokens,
        timeout_s=settings.vendor_timeout_s,
        connect_timeout_s=settings.vendor_connect_timeout_s,
    )
    resources["accredible"] = AccredibleResource(
        base_url=str(settings.credentials_url),
        tokens=tokens,
        timeout_s=settings.vendor_timeout_s,
        connect_timeout_s=settings.vendor_connect_timeout_s,
    )
    return resources


def build_definitions(settings: Settings) -> dg.Definitions:
    """Every capability's Definitions and the resources, from ``settings``."""
    return dg.Definitions.merge(
        *(capability.build_defs(settings) for capability in CAPABILITIES),
        dg.Definitions(resources=build_resources(settings)),
    )
