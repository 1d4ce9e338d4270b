"""``followup dev``, ``migrate`` and ``doctor``."""

from __future__ import annotations

import argparse
from datetime import datetime, timedelta
from typing import Any

from followup_pipeline.clock import build_clock
from followup_pipeline.integrations.clickup import ClickUpClient
from followup_pipeline.integrations.errors import IntegrationError
from followup_pipeline.settings import Settings
from followup_pipeline.store.cadences import UnknownCadence, cadence_offsets, define_cadence
from followup_pipeline.store.db import connect, resolve_database_url
from followup_pipeline.store.events import webhook_silence
from followup_pipeline.store.migrate import available_migrations, current_version, migrate


def _dev(args: argparse.Namespace, settings: Settings) -> int:
    from followup_pipeline.launcher import Launcher

    return Launcher(settings, host=args.host, port=args.port).run()


def _migrate(args: argparse.Namespace, settings: Settings) -> int:
    url = resolve_database_url(settings)
    applied = migrate(url, target=args.target)
    for migration in applied:
        print(f"applied {migration.version:04d}_{migration.name}")
    print(f"schema at version {current_version(url)}")
    if args.target is None:
        offsets = prepare_cadence(url, settings)
        print(f"cadence {settings.cadence_name!r}: business days {', '.join(map(str, offsets))}")
    return 0


def prepare_cadence(url: str, settings: Settings) -> tuple[int, ...]:
    """Write ``FOLLOWUP_CADENCE`` (when set) into its named row and check the row exists."""
    with connect(url, autocommit=True) as conn, conn.transaction():
        return define_cadence(
            conn, name=settings.cadence_name, configured=settings.configured_cadence()
        )


def _doctor(args: argparse.Namespace, settings: Settings) -> int:
    print(f"settings: ok (time zone {settings.timezone}, holidays {settings.holiday_country})")
    print(f"watched stages: {', '.join(settings.watched_stages)}")
    missing = settings.sandbox_credentials_missing()
    print(f"vendors: {'sandbox' if len(missing) == 4 else 'real' if not missing else 'MIXED'}")
    url = resolve_database_url(settings)
    version, latest = current_version(url), available_migrations()[-1].version
    print(f"database: reachable, schema version {version} of {latest}")
    cadence_ok = True
    try:
        with connect(url, autocommit=True) as conn:
            offsets = cadence_offsets(conn, settings.cadence_name)
        print(f"cadence {settings.cadence_name!r}: business days {', '.join(map(str, offsets))}")
    except UnknownCadence as error:
        print(f"cadence: FAILED: {error}")
        cadence_ok = False
    if settings.espocrm_webhooks:
        with connect(url, autocommit=True) as conn:
            print(webhook_line(conn, now=build_clock(settings.now).now()))
    else:
        print("webhooks: none configured (FOLLOWUP_ESPOCRM_WEBHOOKS): reconciliation alone")
    clickup_ok = _check_clickup(settings)
    checks = (version == latest, len(missing) in (0, 4), cadence_ok, clickup_ok)
    return 0 if all(checks) else 1


#: With no webhook for this long while reconciliation keeps finding deals, say why it may be.
WEBHOOK_SILENCE = timedelta(days=1)


def webhook_line(conn: Any, *, now: datetime) -> str:
    """The webhooks' line of ``doctor``: when the last one came, and a hint when none came for a
    day while the CRM's deals changed (EspoCRM refuses private targets it was not told of)."""
    silence = webhook_silence(conn, since=now - WEBHOOK_SILENCE)
    last = silence.last_webhook_at
    if last is not None and now - last < WEBHOOK_SILENCE:
        return f"webhooks: the last one arrived {last:%Y-%m-%d %H:%M:%S %Z}"
    if silence.reconciled_since == 0:
        when = f"since {last:%Y-%m-%d %H:%M %Z}" if last else "ever"
        return f"webhooks: none {when}; the CRM's watched deals did not change either"
    return (
        f"webhooks: WARNING: none for a day while reconciliation opened "
        f"{silence.reconciled_since} watch(es): EspoCRM 9.3.2+ refuses a webhook target on a "
        "private address unless it is in webhookAllowedAddressList (Administration > Settings); "
        "deals still come in, an hour late, through reconciliation"
    )


def _check_clickup(settings: Settings) -> bool:
    """The ClickUp list exists and has a closed-type status (with real credentials only)."""
    if settings.clickup_token is None:
        print("clickup: no credentials set (the sandbox stands in); list not checked")
        return True
    client = ClickUpClient(
        str(settings.clickup_url),
        settings.clickup_token.get_secret_value(),
        settings.clickup_list_id,
        settings.clickup_key_field_id,
        closed_status=settings.clickup_closed_status,
        timeouts=settings.vendor_timeouts(),
    )
    try:
        statuses = client.list_statuses()
        status = client.list_closed_status(statuses)  # no second read of the list
    except IntegrationError as error:
        print(f"clickup: FAILED: list {settings.clickup_list_id}: {error}")
        return False
    finally:
        client.close()
    kinds = {name.lower(): kind for name, kind in statuses.items()}  # ClickUp ignores case
    if kinds.get(status.lower()) != "closed":
        closed = ", ".join(repr(n) for n, kind in statuses.items() if kind == "closed") or "none"
        print(
            f"clickup: FAILED: FOLLOWUP_CLICKUP_CLOSED_STATUS {status!r} is no closed-type "
            f"status of list {settings.clickup_list_id} (closed-type: {closed})"
        )
        return False
    print(f"clickup: list {settings.clickup_list_id} closes tasks with status {status!r}")
    return True


def register(commands: Any) -> None:
    """Add ``dev``, ``migrate`` and ``doctor``."""
    dev = commands.add_parser("dev", help="start Postgres, migrate, the sandbox and dagster dev")
    dev.add_argument("--host", default="127.0.0.1")
    dev.add_argument("--port", type=int, default=3000)
    dev.set_defaults(handler=_dev)

    mig = commands.add_parser("migrate", help="apply pending database migrations")
    mig.add_argument("--target", type=int, default=None, help="stop at this version")
    mig.set_defaults(handler=_migrate)

    doctor = commands.add_parser("doctor", help="check settings, database and schema")
    doctor.set_defaults(handler=_doctor)
