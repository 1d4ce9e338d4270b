"""The webhook route's own HTTP (``ingress/asgi.py``) over real uvicorn: what it answers itself,
what it leaves to the framework, and a client that leaves before its body arrived."""

from __future__ import annotations

import socket
import time
from typing import Any
from urllib.parse import urlsplit

import httpx
import psycopg

from .conftest import espocrm_delivery

ITEMS = [{"id": "deal-1", "stage": "Proposal"}]


def _count(db: psycopg.Connection[Any]) -> int:
    row = db.execute("SELECT count(*) AS n FROM events").fetchone()
    assert row is not None
    return int(row["n"])


def test_webhook_paths_that_are_not_a_post_of_one_source_are_the_frameworks(
    ingress: httpx.Client, db: psycopg.Connection[Any]
) -> None:
    body, headers = espocrm_delivery(ITEMS)
    assert ingress.get("/webhooks/espocrm").status_code == 405
    assert ingress.put("/webhooks/forms", content=body, headers=headers).status_code == 405
    assert ingress.post("/webhooks/espocrm/more", content=body, headers=headers).status_code == 404
    assert ingress.post("/webhooks/", content=body, headers=headers).status_code == 404
    assert _count(db) == 0
    stored = ingress.post("/webhooks/espocrm", content=body, headers=headers)
    assert stored.status_code == 200
    assert stored.headers["content-type"] == "application/json"
    assert int(stored.headers["content-length"]) == len(stored.content)
    assert stored.json() == {"event": stored.json()["event"], "duplicate": False}


def test_the_first_of_repeated_signature_headers_is_the_one_checked(
    ingress: httpx.Client, db: psycopg.Connection[Any]
) -> None:
    body, headers = espocrm_delivery(ITEMS)
    good = headers["Signature"]
    forged = espocrm_delivery([{"id": "deal-2", "stage": "Proposal"}])[1]["Signature"]
    base = [("Content-Type", "application/json")]
    first_forged = [*base, ("Signature", forged), ("Signature", good)]
    refused = ingress.post("/webhooks/espocrm", content=body, headers=first_forged)
    assert (refused.status_code, refused.json()["error"]) == (401, "bad_signature")
    assert _count(db) == 0
    first_good = [*base, ("Signature", good), ("Signature", forged)]
    taken = ingress.post("/webhooks/espocrm", content=body, headers=first_good)
    assert taken.status_code == 200
    assert _count(db) == 1


def test_a_client_gone_before_its_body_arrived_is_not_stored(
    ingress: httpx.Client, db: psycopg.Connection[Any]
) -> None:
    body, headers = espocrm_delivery(ITEMS)
    where = urlsplit(str(ingress.base_url))
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    with socket.create_connection((where.hostname, where.port), timeout=5) as raw:
        raw.sendall(
            f"POST /webhooks/espocrm HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
            f"{head}\r\n".encode("latin-1")
            + body[: len(body) // 2]
        )
    time.sleep(0.3)  # (the server reads the close)
    assert _count(db) == 0
    # The ingress serves on, and the whole delivery is stored when it comes.
    assert ingress.post("/webhooks/espocrm", content=body, headers=headers).status_code == 200
    assert _count(db) == 1
