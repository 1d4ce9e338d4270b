"""Where one delivery's time goes in the ingress, stage by stage, measured in this process on the
same embedded Postgres as ``load.py``: reading the headers and checking the signature (HMAC),
parsing the body, building the row, waiting for a pooled connection, the INSERT
(``store_delivery``), its COMMIT, and the answer (the JSON and its two ASGI messages). One
request at a time, so each stage's cost is its own; the group commit's part is the last row: the
same rows stored 32 to a statement and a commit."""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from benchmarks.harness import database
from followup_pipeline.ingress.app import READ_HEADERS
from followup_pipeline.ingress.asgi import answer, headers_of
from followup_pipeline.ingress.batcher import batch_params
from followup_pipeline.ingress.deliveries import parse_delivery
from followup_pipeline.ingress.signatures import verify_espocrm
from followup_pipeline.sandbox.webhooks import php_json, signatures
from followup_pipeline.settings_vendors import EspoWebhook
from followup_pipeline.store import events
from followup_pipeline.store.db import build_async_pool
from followup_pipeline.store.queries import query

HOOK = ("6650a1b2c3d4e5f02", "Opportunity.fieldUpdate.stage", "bench-secret")
ROUNDS = 1000
BATCH = 32


def _delivery(n: int) -> tuple[bytes, dict[str, Any]]:
    """A body and the ASGI scope of its request (its raw headers, as the server gives them)."""
    body = php_json([{"id": f"p-{n}", "stage": "Proposal"}])
    current, legacy = signatures(HOOK[0], body, HOOK[2])
    raw = [
        (b"content-type", b"application/json"),
        (b"signature", current.encode()),
        (b"x-signature", legacy.encode()),
        (b"content-length", str(len(body)).encode()),
    ]
    return body, {"headers": raw}


async def _answers(rounds: int) -> list[float]:
    """Each answer's time: the JSON and the two ASGI messages the server writes."""

    async def send(message: Any) -> None:
        return None

    took = []
    for n in range(rounds):
        started = time.perf_counter()
        await answer(send, 200, {"event": f"event:{n}", "duplicate": False})
        took.append(time.perf_counter() - started)
    return took


def _params(n: int, *, prefix: str) -> dict[str, object]:
    body = php_json([{"id": f"{prefix}-{n}", "stage": "Proposal"}])
    return events.delivery_params(
        source="espocrm", event_type=HOOK[1], body=body, headers={"content-type": "json"}
    )


async def _database_stages(db_url: str) -> dict[str, float]:
    pool = build_async_pool(db_url, max_size=2, name="profile", timeout=5, reconnect_timeout=1)
    await pool.open(wait=True)
    wait, insert, commit = [], [], []
    try:
        for n in range(ROUNDS):
            started = time.perf_counter()
            async with pool.connection() as conn:
                got = time.perf_counter()
                await conn.set_autocommit(False)
                cursor = await conn.execute(query("events_store"), _params(n, prefix="one"))
                await cursor.fetchone()
                inserted = time.perf_counter()
                await conn.commit()
                await conn.set_autocommit(True)
                done = time.perf_counter()
            wait.append(got - started)
            insert.append(inserted - got)
            commit.append(done - inserted)
        batches = []
        for n in range(ROUNDS // BATCH):
            rows = [_params(n * BATCH + k, prefix="batch") for k in range(BATCH)]
            params = batch_params(rows)
            started = time.perf_counter()
            async with pool.connection() as conn:
                cursor = await conn.execute(query("events_store_batch"), params)
                await cursor.fetchall()
            batches.append(time.perf_counter() - started)
    finally:
        await pool.close()
    return {
        "pool wait (a free connection)": statistics.median(wait),
        "INSERT: store_delivery, one row": statistics.median(insert),
        "COMMIT of one row (the WAL flush)": statistics.median(commit),
        f"one statement and commit of {BATCH} rows, per row (group commit)": (
            statistics.median(batches) / BATCH
        ),
    }


def run() -> list[str]:
    """The section of docs/benchmarks.md: a table of the stages' median seconds."""
    webhooks = [EspoWebhook(id=HOOK[0], event=HOOK[1], secret=HOOK[2])]
    deliveries = [_delivery(n) for n in range(ROUNDS)]
    stages: dict[str, list[float]] = {"signature (two HMAC-SHA256)": [], "parse the body": []}
    stages |= {"build the row (hash, JSON)": []}
    for body, scope in deliveries:
        started = time.perf_counter()
        headers = headers_of(scope, READ_HEADERS)
        verified = verify_espocrm(headers, body, webhooks, accept_legacy=False)
        signed = time.perf_counter()
        parsed = parse_delivery("espocrm", verified.event_type, body, stripe=False)
        parsed_at = time.perf_counter()
        events.delivery_params(source="espocrm", event_type=parsed.event_type, body=body,
                               headers=headers)  # fmt: skip
        built = time.perf_counter()
        stages["signature (two HMAC-SHA256)"].append(signed - started)
        stages["parse the body"].append(parsed_at - signed)
        stages["build the row (hash, JSON)"].append(built - parsed_at)
    stages["answer (JSON)"] = asyncio.run(_answers(ROUNDS))
    medians = {name: statistics.median(values) for name, values in stages.items()}
    with database() as db_url:
        medians |= asyncio.run(_database_stages(db_url))
    lines = [
        "| stage of one delivery | median µs |",
        "|---|---:|",
        *(f"| {name} | {seconds * 1e6:,.0f} |" for name, seconds in medians.items()),
        "",
    ]
    return lines


if __name__ == "__main__":
    print("\n".join(run()))
