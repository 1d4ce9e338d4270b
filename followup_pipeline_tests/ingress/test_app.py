"""The ingress over real HTTP and a real Postgres: store, then acknowledge; refuse the rest."""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from followup_pipeline.ingress.signatures import standard_signature
from followup_pipeline.sandbox.webhooks import signatures
from followup_pipeline.store.embedded import EmbeddedCluster
from followup_pipeline.store.migrate import migrate

from .conftest import (
    CREATE_HOOK,
    FORM_SECRET,
    OLD_FORM_SECRET,
    STAGE_HOOK,
    IngressFactory,
    espocrm_delivery,
)

ITEMS = [{"id": "deal-1", "stage": "Proposal"}]


def _events(db: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return list(db.execute("SELECT * FROM events ORDER BY id").fetchall())


def _standard(
    body: bytes, secret: str = FORM_SECRET, age_s: int = 0, msg_id: str = "msg_2Kx9"
) -> dict[str, str]:
    stamp = int(time.time()) - age_s
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(stamp),
        "webhook-signature": standard_signature(secret, msg_id, stamp, body),
    }


def test_ingress_stores_the_raw_body_before_answering(
    ingress: httpx.Client, db: psycopg.Connection[Any]
) -> None:
    body, headers = espocrm_delivery([{"id": "deal-1", "stage": "Proposal", "name": "A/B ü"}])
    response = ingress.post("/webhooks/espocrm", content=body, headers=headers)
    assert response.status_code == 200, response.text
    [event] = _events(db)
    assert response.json() == {"event": f"event:{event['id']}", "duplicate": False}
    assert bytes(event["body"]) == body  # PHP escapes kept byte for byte
    assert (event["source"], event["event_type"], event["status"]) == (
        "espocrm",
        "Opportunity.fieldUpdate.stage",
        "pending",
    )
    assert event["headers"]["signature"] == headers["Signature"]


def test_ingress_ten_identical_deliveries_are_one_event(
    ingress: httpx.Client, db: psycopg.Connection[Any]
) -> None:
    body, headers = espocrm_delivery(ITEMS)
    answers = [ingress.post("/webhooks/espocrm", content=body, headers=headers) for _ in range(10)]
    assert [a.status_code for a in answers] == [200] * 10
    assert [a.json()["duplicate"] for a in answers] == [False] + [True] * 9
    [event] = _events(db)
    assert event["duplicate_count"] == 9


def test_ingress_concurrent_identical_deliveries_are_one_event(
    ingress: httpx.Client, db: psycopg.Connection[Any]
) -> None:
    body, headers = espocrm_delivery(ITEMS)
    with ThreadPoolExecutor(8) as pool:
        codes = list(
            pool.map(
                lambda _: ingress.post("/webhooks/espocrm", content=body, headers=headers),
                range(16),
            )
        )
    assert {c.status_code for c in codes} == {200}
    [event] = _events(db)
    assert event["duplicate_count"] == 15


def test_ingress_same_body_after_the_window_is_a_new_event(
    ingress: httpx.Client, db: psycopg.Connection[Any]
) -> None:
    body, headers = espocrm_delivery(ITEMS)
    ingress.post("/webhooks/espocrm", content=body, headers=headers)
    db.execute("UPDATE events SET received_at = received_at - interval '61 minutes'")
    assert not ingress.post("/webhooks/espocrm", content=body, headers=headers).json()["duplicate"]
    # The webhook id in EspoCRM's signature names a webhook, not a message: no delivery id.
    assert [(e["duplicate_count"], e["delivery_id"]) for e in _events(db)] == [(0, None)] * 2


def test_ingress_accepts_the_legacy_signature_only_when_enabled(
    make_ingress: IngressFactory, db: psycopg.Connection[Any]
) -> None:
    body, headers = espocrm_delivery(ITEMS)
    legacy = {"X-Signature": headers["X-Signature"]}
    with make_ingress() as client:
        assert client.post("/webhooks/espocrm", content=body, headers=legacy).status_code == 200
    with make_ingress(espocrm_legacy_signature=False) as client:
        answer = client.post("/webhooks/espocrm", content=body, headers=legacy)
        assert (answer.status_code, answer.json()["error"]) == (401, "missing_signature")
    assert len(_events(db)) == 1


def _refusals() -> list[tuple[str, str, bytes, dict[str, str], int, str]]:
    body, headers = espocrm_delivery(ITEMS)
    wrong_secret, _ = signatures(STAGE_HOOK[0], body, "not-the-secret")
    unknown_hook, _ = signatures("ffffffffffffffff0", body, STAGE_HOOK[2])
    form = json.dumps({"type": "form.submitted", "data": {"email": "a@example.com"}}).encode()
    big = b"[" + b" " * (2 * 1024 * 1024) + b"]"
    big_headers = {"Signature": signatures(STAGE_HOOK[0], big, STAGE_HOOK[2])[0]}
    # The right webhook id with a digest that is not the body's, in both headers' forms.
    forged = base64.b64encode(f"{STAGE_HOOK[0]}:{'0' * 64}".encode()).decode()
    forged_legacy = base64.b64encode(STAGE_HOOK[0].encode() + b":" + bytes(32)).decode()
    cases = [
        (
            "not a signature",
            "espocrm",
            body,
            {"Signature": "bm90IGEgc2lnbmF0dXJl"},
            401,
            "unknown_webhook",
        ),
        ("bad signature", "espocrm", body, {"Signature": forged}, 401, "bad_signature"),
        (
            "bad legacy signature",
            "espocrm",
            body,
            {"X-Signature": forged_legacy},
            401,
            "bad_signature",
        ),
        (
            "bad signature beside a good legacy one",
            "espocrm",
            body,
            {"Signature": forged, "X-Signature": headers["X-Signature"]},
            401,
            "bad_signature",
        ),
        ("garbled signature", "espocrm", body, {"Signature": "%%%"}, 401, "bad_signature"),
        ("wrong secret", "espocrm", body, {"Signature": wrong_secret}, 401, "bad_signature"),
        ("unknown webhook", "espocrm", body, {"Signature": unknown_hook}, 401, "unknown_webhook"),
        ("missing signature", "espocrm", body, {}, 401, "missing_signature"),
        (
            "truncated body",
            "espocrm",
            body[:-5],
            {"Signature": headers["Signature"]},
            401,
            "bad_signature",
        ),
        (
            "stale timestamp",
            "forms",
            form,
            lambda: _standard(form, age_s=360),
            401,
            "stale_timestamp",
        ),
        (
            "future timestamp",
            "forms",
            form,
            lambda: _standard(form, age_s=-360),
            401,
            "stale_timestamp",
        ),
        (
            "unknown form secret",
            "forms",
            form,
            lambda: _standard(form, secret="whsec_" + "QUJD" * 8),
            401,
            "bad_signature",
        ),
        ("unknown source", "payments", form, lambda: _standard(form), 401, "unknown_source"),
        ("2 MiB body", "espocrm", big, big_headers, 413, "too_large"),
    ]
    return [pytest.param(*case[1:], id=case[0]) for case in cases]  # type: ignore[misc]


@pytest.mark.parametrize(("source", "body", "headers", "status", "reason"), _refusals())
def test_ingress_refuses_and_stores_nothing(
    ingress: httpx.Client,
    db: psycopg.Connection[Any],
    source: str,
    body: bytes,
    headers: dict[str, str] | Callable[[], dict[str, str]],
    status: int,
    reason: str,
) -> None:
    # Standard Webhooks headers are signed now, not at collection: their clock is the point.
    sent = headers() if callable(headers) else headers
    answer = ingress.post(f"/webhooks/{source}", content=body, headers=sent)
    assert (answer.status_code, answer.json()["error"]) == (status, reason)
    assert _events(db) == []
    metrics = ingress.get("/metrics").text
    assert f'followup_ingress_rejected_total{{reason="{reason}"}} 1' in metrics


def test_ingress_keeps_a_signed_non_json_body_as_a_dead_letter(
    ingress: httpx.Client, db: psycopg.Connection[Any]
) -> None:
    body = b'[{"id": "deal-1", "stage": "Propo'
    current, _ = signatures(STAGE_HOOK[0], body, STAGE_HOOK[2])
    answer = ingress.post("/webhooks/espocrm", content=body, headers={"Signature": current})
    assert answer.status_code == 400
    assert answer.json()["error"] == "unparseable"
    assert answer.json()["detail"].startswith("not JSON")
    [event] = _events(db)
    assert (event["status"], event["dead_step"]) == ("dead", "ingress")
    assert event["last_error"].startswith("not JSON")
    assert "followup_events_dead 1" in ingress.get("/metrics").text


def test_ingress_standard_webhooks_with_a_rotated_secret_are_stored_unhandled(
    ingress: httpx.Client, db: psycopg.Connection[Any]
) -> None:
    form = json.dumps({"type": "form.submitted", "data": {"email": "a@example.com"}}).encode()
    headers = _standard(form, secret=OLD_FORM_SECRET)
    headers["webhook-signature"] = "v1,bm9wZQ== " + headers["webhook-signature"]
    assert ingress.post("/webhooks/forms", content=form, headers=headers).status_code == 200
    [event] = _events(db)
    assert (event["source"], event["event_type"], event["status"]) == (
        "forms",
        "form.submitted",
        "unhandled",
    )


FORM = json.dumps({"type": "form.submitted", "data": {"email": "a@example.com"}}).encode()


def test_ingress_standard_webhooks_retry_of_an_id_days_later_is_a_duplicate(
    ingress: httpx.Client, db: psycopg.Connection[Any]
) -> None:
    first = ingress.post("/webhooks/forms", content=FORM, headers=_standard(FORM, msg_id="msg_A"))
    assert first.json()["duplicate"] is False
    # Three days on (past the hour of the body-hash rule, within a sender's retries), and after
    # a purge that emptied its headers: the retry, newly stamped and signed, is the same message.
    db.execute(
        "UPDATE events SET received_at = received_at - interval '3 days', headers = '{}'::jsonb"
    )
    retry = _standard(FORM, age_s=-30, msg_id="msg_A")
    again = ingress.post("/webhooks/forms", content=FORM, headers=retry)
    assert (again.status_code, again.json()) == (200, {**first.json(), "duplicate": True})
    [event] = _events(db)
    assert (event["delivery_id"], event["duplicate_count"]) == ("msg_A", 1)
    # Another message with the same body is another event, even within the hour.
    other = ingress.post("/webhooks/forms", content=FORM, headers=_standard(FORM, msg_id="msg_B"))
    assert other.json()["duplicate"] is False
    assert [(e["delivery_id"], e["duplicate_count"]) for e in _events(db)] == [
        ("msg_A", 1),
        ("msg_B", 0),
    ]
    metrics = ingress.get("/metrics").text
    assert 'followup_ingress_received_total{source="forms"} 2' in metrics
    assert 'followup_ingress_duplicates_total{source="forms"} 1' in metrics


def test_ingress_concurrent_deliveries_of_one_id_are_one_event(
    ingress: httpx.Client, db: psycopg.Connection[Any]
) -> None:
    # Each with its own timestamp, signature and even body: the id alone says it is one message.
    def deliver(n: int) -> httpx.Response:
        body = json.dumps({"type": "form.submitted", "data": {"attempt": n}}).encode()
        headers = _standard(body, age_s=n % 3, msg_id="msg_concurrent")
        return ingress.post("/webhooks/forms", content=body, headers=headers)

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(deliver, range(16)))
    assert {a.status_code for a in answers} == {200}
    assert sorted(a.json()["duplicate"] for a in answers) == [False] + [True] * 15
    assert len({a.json()["event"] for a in answers}) == 1
    [event] = _events(db)
    assert event["duplicate_count"] == 15


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_ingress_answers_503_never_200_without_a_database(make_ingress: IngressFactory) -> None:
    url = f"postgresql://postgres@127.0.0.1:{_closed_port()}/followup"
    body, headers = espocrm_delivery(ITEMS, CREATE_HOOK)
    with make_ingress(url=url, app_kwargs={"db_timeout_s": 0.5}) as client:
        answer = client.post("/webhooks/espocrm", content=body, headers=headers)
        assert (answer.status_code, answer.json()["error"]) == (503, "database_unavailable")
        assert client.get("/healthz").status_code == 503
        metrics = client.get("/metrics").text
        assert "followup_database_up 0" in metrics
        assert 'followup_ingress_rejected_total{reason="database_unavailable"} 1' in metrics


def test_ingress_health_and_metrics_report_the_event_log(
    ingress: httpx.Client, db: psycopg.Connection[Any]
) -> None:
    assert ingress.get("/healthz").json() == {"status": "ok", "database": "ok"}
    body, headers = espocrm_delivery(ITEMS)
    for _ in range(2):
        ingress.post("/webhooks/espocrm", content=body, headers=headers)
    db.execute("UPDATE events SET received_at = now() - interval '90 seconds'")
    metrics = ingress.get("/metrics").text
    assert 'followup_ingress_received_total{source="espocrm"} 1' in metrics
    assert 'followup_ingress_duplicates_total{source="espocrm"} 1' in metrics
    assert "followup_ingress_request_duration_seconds_count 2" in metrics
    assert "followup_events_pending 1" in metrics
    age = next(
        line
        for line in metrics.splitlines()
        if line.startswith("followup_events_oldest_pending_age_seconds ")
    )
    assert 89 < float(age.split()[1]) < 120


@pytest.fixture
def live_cluster(tmp_path: Path) -> Iterator[tuple[EmbeddedCluster, str]]:
    """A Postgres of the test's own, migrated, that the test may stop and start again."""
    cluster = EmbeddedCluster(tmp_path / "home")
    cluster.acquire()
    try:
        url = cluster.url("followup")
        migrate(url)
        yield cluster, url
    finally:
        cluster.stop()


def test_ingress_answers_503_when_a_live_postgres_stops(
    make_ingress: IngressFactory, live_cluster: tuple[EmbeddedCluster, str]
) -> None:
    cluster, url = live_cluster
    first, headers = espocrm_delivery(ITEMS, CREATE_HOOK)
    with make_ingress(url=url, app_kwargs={"db_timeout_s": 0.5}) as client:
        stored = client.post("/webhooks/espocrm", content=first, headers=headers)
        assert stored.status_code == 200
        cluster.stop()
        second, headers = espocrm_delivery([{**ITEMS[0], "stage": "Negotiation"}], CREATE_HOOK)
        answer = client.post("/webhooks/espocrm", content=second, headers=headers)
        assert (answer.status_code, answer.json()["error"]) == (503, "database_unavailable")
        assert client.get("/healthz").status_code == 503
        cluster.acquire()  # Postgres is back; EspoCRM retries the 503
        deadline = time.monotonic() + 30  # the pool reconnects in the background
        while client.get("/healthz").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.5)
        retried = client.post("/webhooks/espocrm", content=second, headers=headers)
        assert retried.status_code == 200
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM followup.events").fetchone() == (2,)


def test_ingress_the_first_delivery_after_postgres_is_back_is_stored(
    make_ingress: IngressFactory, live_cluster: tuple[EmbeddedCluster, str]
) -> None:
    cluster, url = live_cluster
    with make_ingress(url=url, app_kwargs={"db_timeout_s": 0.5}) as client:
        assert client.get("/healthz").status_code == 200
        cluster.stop()
        # Six seconds of deliveries into the outage: the pool's doubling backoff (1, 2, 4 s)
        # would put its next background attempt well after Postgres is back.
        for n in range(6):
            body, headers = espocrm_delivery([{"id": f"lost-{n}", "stage": "Proposal"}])
            assert (
                client.post("/webhooks/espocrm", content=body, headers=headers).status_code == 503
            )
            time.sleep(1)
        cluster.acquire()
        body, headers = espocrm_delivery([{"id": "back", "stage": "Proposal"}])
        answer = client.post("/webhooks/espocrm", content=body, headers=headers)
        assert answer.status_code == 200


def test_ingress_refuses_a_chunked_body_over_the_limit(
    ingress: httpx.Client, db: psycopg.Connection[Any]
) -> None:
    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit must hold while reading
        for _ in range(3):
            yield b" " * (512 * 1024)

    answer = ingress.post("/webhooks/espocrm", content=chunks(), headers={"Signature": "x"})
    assert (answer.status_code, answer.json()["error"]) == (413, "too_large")
    assert _events(db) == []


def test_ingress_standard_webhooks_known_answer() -> None:
    # The example of the Standard Webhooks specification, computed by its authors.
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    body = b'{"test": 2432232314}'
    signature = standard_signature(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body)
    assert signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
