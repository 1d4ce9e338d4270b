"""``followup serve ROLE``: one process of a production machine, on its own host or in its own
container (``deploy/``): the Dagster webserver, the daemon, the code server, or the ingress.

Every role reads the same settings and installs the same ``dagster.yaml`` into its
``DAGSTER_HOME``. With ``FOLLOWUP_CODE_SERVER_HOST`` set, the webserver and the daemon load the
code location from that code server over gRPC (``machine.grpc_workspace``); the code server alone
gets the vendors' secrets, since the runs it launches are the only processes that call them.
Each role binds to 127.0.0.1 unless ``--host`` says otherwise. SIGTERM stops the role as Ctrl-C
does (``commands/dagster.py: supervise``). The database is migrated by ``followup migrate``,
run once before the roles start.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from followup_pipeline.commands.dagster import check_vendors, supervise
from followup_pipeline.commands.ingress import add_workers_option, serve_ingress
from followup_pipeline.machine import (
    LOCATION,
    MODULE,
    dagster_home,
    install_dagster_home,
    machine_environment,
    with_sandbox,
)
from followup_pipeline.settings import Settings
from followup_pipeline.store.db import resolve_database_url

#: The roles, and the port each serves on by default (the daemon serves none).
ROLES = ("webserver", "daemon", "code-server", "ingress")
WEBSERVER_PORT = 3000


def role_argv(role: str, host: str, port: int, settings: Settings) -> list[str]:
    """The Dagster command of ``role`` (not the ingress, which is ours)."""
    scripts = Path(sys.executable).parent
    home = dagster_home(settings)
    workspace = str(home / "workspace.yaml")
    if role == "webserver":
        return [str(scripts / "dagster-webserver"), "-h", host, "-p", str(port), "-w", workspace]
    if role == "daemon":
        return [str(scripts / "dagster-daemon"), "run", "-w", workspace]
    if role == "code-server":
        return [
            str(scripts / "dagster"), "code-server", "start", "-h", host, "-p", str(port),
            "-m", MODULE, "-d", str(home), "--location-name", LOCATION,
        ]  # fmt: skip
    raise ValueError(f"unknown role {role!r}")


def default_port(role: str, settings: Settings) -> int:
    """Where ``role`` serves when ``--port`` is not given."""
    if role == "ingress":
        return settings.ingress_port
    if role == "code-server":
        return settings.code_server_port
    return WEBSERVER_PORT


def _serve(args: argparse.Namespace, settings: Settings) -> int:
    role: str = args.role
    if role == "ingress":
        return serve_ingress(args, settings)
    # The code server listens where the other roles look for it.
    code_server_host = settings.code_server_host if role == "code-server" else None
    host = args.host or code_server_host or "127.0.0.1"
    port = args.port or default_port(role, settings)
    if role != "code-server" and settings.code_server_host is None:
        # Without it Dagster would start a code server of its own in this process's place, and
        # its runs would have none of the vendors' secrets.
        print(
            f"followup serve {role}: set FOLLOWUP_CODE_SERVER_HOST (and FOLLOWUP_CODE_SERVER_PORT) "
            "to where `followup serve code-server` listens",
            file=sys.stderr,
        )
        return 2
    resolve_database_url(settings)  # refuses a machine that does not exist
    if role == "code-server":
        check_vendors(settings)  # the only role whose runs call the vendors
    install_dagster_home(with_sandbox(settings))
    # Only the code server's runs call the vendors: the other roles get no secrets.
    env = machine_environment(settings, dict(os.environ), secrets=role == "code-server")
    argv = role_argv(role, host, port, settings)
    print(f"followup serve {role}: {' '.join(argv)}", flush=True)
    return supervise(argv, env)


def register(commands: Any) -> None:
    """Add ``serve``."""
    serve = commands.add_parser(
        "serve",
        help="run one role of a production machine: webserver, daemon, code-server or ingress",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    serve.add_argument("role", choices=ROLES)
    serve.add_argument(
        "--host",
        default=None,
        help="interface (default 127.0.0.1; code-server: FOLLOWUP_CODE_SERVER_HOST, the "
        "ingress: FOLLOWUP_INGRESS_HOST)",
    )
    serve.add_argument(
        "--port",
        type=int,
        default=None,
        help="port (default: webserver 3000, code-server FOLLOWUP_CODE_SERVER_PORT, "
        "ingress FOLLOWUP_INGRESS_PORT)",
    )
    add_workers_option(serve, role="ingress only: ")
    serve.set_defaults(handler=_serve)
