"""``followup dev``, ``migrate`` and ``doctor``."""

from __future__ import annotations

import argparse
from typing import Any

from followup_pipeline.settings import Settings
from followup_pipeline.store.db import resolve_database_url
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
    return 0


def _doctor(args: argparse.Namespace, settings: Settings) -> int:
    print(f"settings: ok (time zone {settings.timezone}, holidays {settings.holiday_country})")
    print(f"watched stages: {', '.join(settings.watched_stages)}")
    missing = settings.sandbox_credentials_missing()
    print(f"vendors: {'sandbox' if len(missing) == 4 else 'real' if not missing else 'MIXED'}")
    url = resolve_database_url(settings)
    version, latest = current_version(url), available_migrations()[-1].version
    print(f"database: reachable, schema version {version} of {latest}")
    return 0 if version == latest and len(missing) in (0, 4) else 1


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
