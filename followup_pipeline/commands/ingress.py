"""``followup ingress``: serve the webhook ingress with uvicorn on loopback, from as many worker
processes as cores.

Stopping as production stops it: SIGTERM (systemd, Docker, Kubernetes) and SIGINT alike drain
the requests in flight (each still answered only after its commit), stop every worker, and then
release the embedded cluster this process started (``resolve_database_url``'s exit hook). uvicorn
raises the signal it caught once it has shut down; SIGTERM's default action would then end the
process before its exit hooks run, leaving Postgres without an owner, so ``cli.main`` turns
SIGTERM into ``SystemExit`` for every command.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from typing import Any

from followup_pipeline.ingress.metrics import MULTIPROCESS_DIR
from followup_pipeline.settings import Settings
from followup_pipeline.store.db import resolve_database_url

#: What each worker reads to build its app (``app_from_environment``).
APP_FACTORY = "followup_pipeline.ingress.app:app_from_environment"


#: Workers by default at most: each holds database connections, and a big host's cores would
#: ask Postgres for more than it allows.
MAX_DEFAULT_WORKERS = 8


def default_workers() -> int:
    """As many workers as cores this process may use (at most ``MAX_DEFAULT_WORKERS``): the
    ingress is CPU-bound (parsing, signatures, the driver)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    return max(1, min(cores, MAX_DEFAULT_WORKERS))


def serve_ingress(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    url = resolve_database_url(settings)
    host = args.host or settings.ingress_host
    port = args.port or settings.ingress_port
    workers = args.workers or default_workers()
    if workers < 1:
        print(f"followup: --workers {workers}: give 1 or more")
        return 2
    # The workers share the ingress's connection budget, two at least each.
    per_worker = max(2, settings.ingress_db_connections // workers)
    options: dict[str, Any] = {
        "host": host,
        "port": port,
        "ws": "none",
        "log_level": "info",
        "server_header": False,
        # A line per request costs more than storing it; refusals are logged by the app.
        "access_log": False,
        # Nothing of the ingress reads the client's address (nginx logs and limits by it).
        "proxy_headers": False,
        # Each worker drains its requests before it stops; after this, they are cut.
        "timeout_graceful_shutdown": 15,
    }
    if workers == 1:
        from followup_pipeline.ingress import create_app

        os.environ.pop(MULTIPROCESS_DIR, None)  # one process: its counters are its own
        uvicorn.run(create_app(settings, url, pool_size=per_worker), **options)
        return 0
    # The workers are new processes: they read the database's URL (the embedded cluster this
    # process holds) and where to keep their counters from the environment.
    counters = tempfile.mkdtemp(prefix="followup-ingress-metrics-")
    os.environ["FOLLOWUP_DATABASE_URL"] = url
    os.environ["FOLLOWUP_INGRESS_POOL_SIZE"] = str(per_worker)
    os.environ[MULTIPROCESS_DIR] = counters
    try:
        uvicorn.run(APP_FACTORY, factory=True, workers=workers, **options)
    finally:
        shutil.rmtree(counters, ignore_errors=True)
    return 0


def register(commands: Any) -> None:
    """Add ``ingress``."""
    ingress = commands.add_parser(
        "ingress", help="serve the webhook ingress (default 127.0.0.1:8787)"
    )
    ingress.add_argument("--host", default=None, help="interface (default FOLLOWUP_INGRESS_HOST)")
    ingress.add_argument(
        "--port", type=int, default=None, help="port (default FOLLOWUP_INGRESS_PORT)"
    )
    add_workers_option(ingress)
    ingress.set_defaults(handler=serve_ingress)


def add_workers_option(parser: argparse.ArgumentParser, *, role: str = "") -> None:
    """``--workers``: the ingress's worker processes (``followup ingress``, ``followup serve``)."""
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help=f"{role}worker processes (default: the cores, {default_workers()} here)",
    )
