"""The webhook route's own HTTP, in plain ASGI: a webhook is the ingress's hot path, and the
framework's request, routing and middleware cost more than its signature and parse together
(docs/benchmarks.md, where one delivery's time goes). Everything else the ingress serves goes
through Starlette (``app.py``).

What it keeps of the framework's behaviour: the first of repeated headers; a body over the limit
refused as soon as it is known (its declared length, else as it arrives); every answer JSON with
its length. What it does otherwise: a client gone before its whole body arrived is not answered
(the framework raised, and answered 500 to nobody); nothing of it is stored either way.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import Receive, Scope, Send

from followup_pipeline.ingress.signatures import Rejected

#: The prefix of the webhook routes: ``/webhooks/espocrm`` and ``/webhooks/{source}``.
PREFIX = "/webhooks/"


class Disconnected(Exception):
    """The client went away before its whole body arrived."""


def webhook_source(scope: Scope) -> str | None:
    """The source a request posts a webhook for, or None when it is not a webhook POST (one
    path segment after ``/webhooks/``; anything else is the framework's to answer: 404, 405)."""
    if scope["type"] != "http" or scope["method"] != "POST":
        return None
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root):  # (mounted under a prefix: routed as the framework does)
        path = path[len(root) :]
    if not path.startswith(PREFIX):
        return None
    source = path[len(PREFIX) :]
    if not source or "/" in source:
        return None
    return source


def headers_of(scope: Scope, wanted: frozenset[str]) -> dict[str, str]:
    """The ``wanted`` request headers (lower-case names; the first of repeated ones), read as
    HTTP reads them (latin-1)."""
    found: dict[str, str] = {}
    for raw_name, raw_value in scope["headers"]:
        name = raw_name.decode("latin-1").lower()
        if name in wanted and name not in found:
            found[name] = raw_value.decode("latin-1")
    return found


async def read_body(receive: Receive, declared: str | None, limit: int) -> bytes:
    """The request's body; ``Rejected`` (413) over ``limit`` bytes, ``Disconnected`` if the
    client left first."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise Rejected("too_large", f"body over {limit} bytes", 413)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Disconnected
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise Rejected("too_large", f"body over {limit} bytes", 413)
        if chunk:
            chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks) if len(chunks) != 1 else chunks[0]


async def answer(send: Send, status: int, content: dict[str, Any]) -> None:
    """A JSON answer, written as the framework writes one (compact, UTF-8, with its length)."""
    body = json.dumps(content, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-length", str(len(body)).encode("ascii")),
                (b"content-type", b"application/json"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
