"""``followup ingress``: serve the webhook ingress with uvicorn on loopback."""

from __future__ import annotations

import argparse
from typing import Any

from followup_pipeline.settings import Settings
from followup_pipeline.store.db import resolve_database_url


def _ingress(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    from followup_pipeline.ingress import create_app

    app = create_app(settings, resolve_database_url(settings))
    host = args.host or settings.ingress_host
    port = args.port or settings.ingress_port
    uvicorn.run(app, host=host, port=port, ws="none", log_level="info", server_header=False)
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
    ingress.set_defaults(handler=_ingress)
