"""``followup dev`` and ``migrate``."""

from __future__ import annotations

import argparse
from typing import Any

from followup_pipeline.engine.work import LIST_MIGRATION, after_migrate
from followup_pipeline.settings import Settings
from followup_pipeline.store.cadences import prepare_cadence
from followup_pipeline.store.db import resolve_database_url
from followup_pipeline.store.migrate import current_version, migrate


def _dev(args: argparse.Namespace, settings: Settings) -> int:
    from followup_pipeline.launcher import Launcher

    return Launcher(settings, host=args.host, port=args.port, demo=not args.no_demo).run()


def _migrate(args: argparse.Namespace, settings: Settings) -> int:
    url = resolve_database_url(settings, create=True)
    applied = migrate(url, target=args.target)
    for migration in applied:
        print(f"applied {migration.version:04d}_{migration.name}")
    version = current_version(url)
    print(f"schema at version {version}")
    if args.target is None:
        offsets = prepare_cadence(url, settings)
        print(f"cadence {settings.cadence_name!r}: business days {', '.join(map(str, offsets))}")
    if version >= LIST_MIGRATION:
        # Also after --target: the upgrade's failures were alerted before the list existed.
        synced = after_migrate(url, settings, [m.version for m in applied])
        if synced.new or synced.closed:
            print(
                f"work waiting for a person: {synced.new} item(s) taken in, "
                f"{synced.closed} closed (followup work list)"
            )
    return 0


def register(commands: Any) -> None:
    """Add ``dev`` and ``migrate``."""
    dev = commands.add_parser("dev", help="start Postgres, migrate, the sandbox and dagster dev")
    dev.add_argument("--host", default="127.0.0.1")
    dev.add_argument("--port", type=int, default=3000)
    dev.add_argument(
        "--no-demo",
        action="store_true",
        help="on the sandbox: no busy demo CRM, webhooks every 2 minutes, no evaluate at start",
    )
    dev.set_defaults(handler=_dev)

    mig = commands.add_parser("migrate", help="apply pending database migrations")
    mig.add_argument("--target", type=int, default=None, help="stop at this version")
    mig.set_defaults(handler=_migrate)
