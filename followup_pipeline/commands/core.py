"""``followup dev``, ``migrate`` and ``doctor``."""

from __future__ import annotations

import argparse
from typing import Any

from followup_pipeline.settings import Settings
from followup_pipeline.store.cadences import UnknownCadence, cadence_offsets, define_cadence
from followup_pipeline.store.db import connect, resolve_database_url
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
    return 0 if version == latest and len(missing) in (0, 4) and cadence_ok else 1


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
