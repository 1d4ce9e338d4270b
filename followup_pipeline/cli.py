"""The ``followup`` command: dev, migrate, sandbox, doctor."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

from followup_pipeline.settings import ConfigError, Settings, load_settings
from followup_pipeline.store.db import StoreError, resolve_database_url
from followup_pipeline.store.migrate import available_migrations, current_version, migrate

Handler = Callable[[argparse.Namespace, Settings], int]


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


def _sandbox(argv: Sequence[str]) -> int:
    from followup_pipeline.sandbox.server import main as sandbox_main

    status: int = sandbox_main(list(argv))
    return status


def build_parser() -> argparse.ArgumentParser:
    """The command line: one sub-command per operator task."""
    parser = argparse.ArgumentParser(prog="followup", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    dev = commands.add_parser("dev", help="start Postgres, migrate, the sandbox and dagster dev")
    dev.add_argument("--host", default="127.0.0.1")
    dev.add_argument("--port", type=int, default=3000)
    dev.set_defaults(handler=_dev)

    mig = commands.add_parser("migrate", help="apply pending database migrations")
    mig.add_argument("--target", type=int, default=None, help="stop at this version")
    mig.set_defaults(handler=_migrate)

    doctor = commands.add_parser("doctor", help="check settings, database and schema")
    doctor.set_defaults(handler=_doctor)

    commands.add_parser(
        "sandbox", help="serve the local vendor sandbox (see --help)", add_help=False
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``followup`` console script."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args_list[:1] == ["sandbox"]:
        return _sandbox(args_list[1:])
    args = build_parser().parse_args(args_list)
    try:
        settings = load_settings()
        handler: Handler = args.handler
        return handler(args, settings)
    except ConfigError as error:
        print(f"followup: {error}", file=sys.stderr)
        return 2
    except StoreError as error:
        print(f"followup: database error: {error}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    raise SystemExit(main())
