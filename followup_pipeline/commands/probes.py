"""The doctor's lines and its probes of the vendors: each asks one vendor, at once and without
retries, whether the credentials and the configuration work, and says so in one ``Check``.

A probe raises the vendor's error (``IntegrationError``, ``ValueError``) when the vendor refuses
or does not answer; ``followup doctor`` turns it into the vendor's failed line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import psycopg
from mistralai.client.utils import BackoffStrategy, RetryConfig

from followup_pipeline.integrations.clickup import ClickUpClient
from followup_pipeline.integrations.espocrm import EspoCrmClient
from followup_pipeline.integrations.http import Timeouts
from followup_pipeline.integrations.mistral import MistralClient
from followup_pipeline.integrations.outlook import OutlookClient
from followup_pipeline.machine import ui_url
from followup_pipeline.settings import ConfigError, Settings
from followup_pipeline.store.alerts import count_unsent as count_unsent_alerts
from followup_pipeline.store.db import StoreError, connect, resolve_database_url

Level = Literal["ok", "WARN", "FAIL"]
#: How long a vendor may take to answer the doctor.
DOCTOR_TIMEOUT_S = 10.0
NO_RETRY = RetryConfig("none", BackoffStrategy(0, 0, 1.0, 0), retry_connection_errors=False)


@dataclass(frozen=True)
class Check:
    """One line of the doctor's report."""

    level: Level
    name: str
    detail: str

    def line(self) -> str:
        detail = " ".join(self.detail.split())  # one line, whatever a vendor answered
        return f"{self.level:<4} {self.name}: {detail}"


def ok(name: str, detail: str) -> Check:
    return Check("ok", name, detail)


def warn(name: str, detail: str) -> Check:
    return Check("WARN", name, detail)


def fail(name: str, detail: str) -> Check:
    return Check("FAIL", name, detail)


def no_wait(seconds: float) -> None:
    """A doctor answers now: a vendor's retries are not waited for."""


def doctor_timeouts(settings: Settings) -> Timeouts:
    """The vendor clients' timeouts, at most ten seconds to answer."""
    configured = settings.vendor_timeouts()
    return Timeouts(min(configured.read_s, DOCTOR_TIMEOUT_S), configured.connect_s)


def espocrm(settings: Settings) -> Check:
    """The CRM accepts the credentials and knows the configured stages."""
    key = settings.espocrm_api_key
    hmac = settings.espocrm_hmac_secret
    client = EspoCrmClient(
        str(settings.espocrm_url),
        key.get_secret_value() if key else "",
        hmac.get_secret_value() if hmac else None,
        sleep=no_wait,
        timeouts=doctor_timeouts(settings),
    )
    try:
        valid = client.stage_options()
    finally:
        client.close()
    configured = {
        "FOLLOWUP_WATCHED_STAGES": settings.watched_stages,
        "FOLLOWUP_WON_STAGE": [settings.won_stage],
        "FOLLOWUP_LOST_STAGE": [settings.lost_stage],
    }
    bad = [f"{name} {s!r}" for name, stages in configured.items() for s in stages if s not in valid]
    if bad:
        return fail(
            "espocrm",
            f"{'; '.join(bad)}: no such stage in the CRM "
            f"(its stages: {', '.join(repr(v) for v in valid)})",
        )
    return ok("espocrm", f"{settings.espocrm_url}: credentials accepted, the stages exist")


def _clickup(settings: Settings, list_id: str) -> ClickUpClient:
    """A ClickUp client of the list ``list_id`` that does not wait out a rate limit."""
    token = settings.clickup_token
    return ClickUpClient(
        str(settings.clickup_url),
        token.get_secret_value() if token else "",
        list_id,
        settings.clickup_key_field_id,
        closed_status=settings.clickup_closed_status,
        sleep=no_wait,
        timeouts=doctor_timeouts(settings),
    )


def clickup(settings: Settings) -> Check:
    """The list exists, and the status that closes its tasks is of type closed."""
    client = _clickup(settings, settings.clickup_list_id)
    try:
        statuses = client.list_statuses()
        status = client.list_closed_status(statuses)  # no second read of the list
    finally:
        client.close()
    kinds = {name.lower(): kind for name, kind in statuses.items()}  # ClickUp ignores case
    if kinds.get(status.lower()) != "closed":
        closed = ", ".join(repr(n) for n, kind in statuses.items() if kind == "closed") or "none"
        return fail(
            "clickup",
            f"FOLLOWUP_CLICKUP_CLOSED_STATUS {status!r} is no closed-type status of list "
            f"{settings.clickup_list_id} (closed-type: {closed})",
        )
    return ok("clickup", f"list {settings.clickup_list_id} closes tasks with status {status!r}")


def outlook(settings: Settings) -> Check:
    """Graph grants a token and lets the app read the sender's mailbox."""
    secret = settings.graph_client_secret
    client = OutlookClient(
        str(settings.graph_login_url),
        str(settings.graph_url),
        settings.graph_tenant_id,
        settings.graph_client_id,
        secret.get_secret_value() if secret else "",
        settings.graph_sender,
        sleep=no_wait,
        timeouts=doctor_timeouts(settings),
    )
    try:
        client.access_token()
        # The mailbox lookup that settles a send whose answer was lost needs a read permission.
        client.find_sent("followup-doctor-probe")
    finally:
        client.close()
    sender = settings.graph_sender
    return ok(
        "outlook",
        f"app {settings.graph_client_id} gets a token and reads {sender}'s mailbox; mail goes "
        f"from {sender}",
    )


def mistral(settings: Settings) -> Check:
    """Mistral accepts the key and offers the configured model."""
    key = settings.mistral_api_key
    client = MistralClient(
        key.get_secret_value() if key else "",
        settings.mistral_model,
        server_url=str(settings.mistral_url).rstrip("/"),
        retry_config=NO_RETRY,
        timeouts=doctor_timeouts(settings),
    )
    try:
        models = client.available_models()
    finally:
        client.close()
    if settings.mistral_model not in models:
        model = settings.mistral_model
        return fail("mistral", f"FOLLOWUP_MISTRAL_MODEL {model!r} is not among the key's models")
    return ok("mistral", f"key accepted, model {settings.mistral_model} available")


def alerts(settings: Settings) -> Check:
    """Who alerts reach (the owner and backup by mail, the operations list when mail fails),
    that the list exists, and whether any alert reached nobody yet."""
    owners = settings.ops_recipients()
    ops_list = settings.ops_clickup_list_id
    if ops_list:
        client = _clickup(settings, ops_list)
        try:
            client.list_statuses()  # the list exists and the token reaches it
        finally:
            client.close()
    try:
        with connect(resolve_database_url(settings), autocommit=True) as conn:
            waiting = count_unsent_alerts(conn)
    except (ConfigError, StoreError, psycopg.Error):
        waiting = 0  # the database check says what is wrong with it
    if not owners and not ops_list:
        return fail(
            "alerts",
            "nobody receives alerts: set FOLLOWUP_OPS_OWNER, FOLLOWUP_OPS_BACKUP and "
            "FOLLOWUP_OPS_CLICKUP_LIST_ID",
        )
    if not owners:
        return warn(
            "alerts",
            f"FOLLOWUP_OPS_OWNER and FOLLOWUP_OPS_BACKUP are not set: alerts go to the ClickUp "
            f"list {ops_list} only",
        )
    if not ops_list:
        return warn(
            "alerts",
            f"mail to {', '.join(owners)}, and no second channel when mail fails "
            "(FOLLOWUP_OPS_CLICKUP_LIST_ID)",
        )
    if settings.ops_backup is None or settings.ops_owner is None:
        return warn("alerts", f"mail to {owners[0]} alone: set both FOLLOWUP_OPS_OWNER and _BACKUP")
    if waiting:
        return warn("alerts", f"{waiting} alert(s) reached nobody yet: followup alerts list")
    return ok(
        "alerts",
        f"mail to {', '.join(owners)}; ClickUp list {ops_list} when mail fails; run links to "
        f"{ui_url(settings)} (FOLLOWUP_UI_URL)",
    )


def clickup_users(settings: Settings) -> Check:
    """Each salesperson of ``FOLLOWUP_CLICKUP_USER_MAP`` is a member of the list (else their
    tasks cannot be assigned to them)."""
    if not settings.clickup_user_map:
        return ok("clickup users", "no FOLLOWUP_CLICKUP_USER_MAP: tasks are not assigned")
    client = _clickup(settings, settings.clickup_list_id)
    try:
        members = client.list_members()
    finally:
        client.close()
    strangers = {crm: cu for crm, cu in settings.clickup_user_map.items() if cu not in members}
    if strangers:
        named = ", ".join(f"CRM user {crm} -> ClickUp {cu}" for crm, cu in strangers.items())
        return fail(
            "clickup users",
            f"FOLLOWUP_CLICKUP_USER_MAP names no member of list {settings.clickup_list_id}: "
            f"{named} (their tasks cannot be assigned to them)",
        )
    names = ", ".join(members[cu] for cu in settings.clickup_user_map.values())
    return ok("clickup users", f"{len(settings.clickup_user_map)} mapped to members: {names}")
