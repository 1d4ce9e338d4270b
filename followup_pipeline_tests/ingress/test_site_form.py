"""The site form, a Standard Webhooks source: its body stored pending as ``form.submitted``, and
a message id recognised however late its redelivery comes."""

from __future__ import annotations

import json
import time
from typing import Any

import psycopg

from followup_pipeline.ingress.signatures import standard_signature

from .conftest import IngressFactory, Linked

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SUBMISSION = {
    "type": "form.submitted",
    "timestamp": "2026-03-02T09:15:22.123456Z",
    "data": {
        "name": "Katrin Brandt",
        "email": "k.brandt@brandt-moebel.example",
        "company": None,
        "phone": None,
        "message": "Bitte um Rückruf.",
        "consent": True,
        "page": None,
    },
}


def _events(db: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return list(db.execute("SELECT * FROM events ORDER BY id").fetchall())


def test_site_form_submission_is_stored_pending_as_form_submitted(
    make_ingress: IngressFactory, db: psycopg.Connection[Any]
) -> None:
    body = json.dumps(SUBMISSION, ensure_ascii=False).encode()
    stamp = int(time.time())
    headers = {
        "webhook-id": "msg_2aBcDeFgHiJkLmNoPqRsTuVwXyZ",
        "webhook-timestamp": str(stamp),
        "webhook-signature": standard_signature(
            SECRET, "msg_2aBcDeFgHiJkLmNoPqRsTuVwXyZ", stamp, body
        ),
    }
    with make_ingress(standard_webhooks={"site-form": [SECRET]}) as ingress:
        answer = ingress.post("/webhooks/site-form", content=body, headers=headers)
    assert (answer.status_code, answer.json()["duplicate"]) == (200, False), answer.text
    [event] = _events(db)
    assert (event["source"], event["event_type"], event["status"], event["delivery_id"]) == (
        "site-form",
        "form.submitted",
        "pending",
        "msg_2aBcDeFgHiJkLmNoPqRsTuVwXyZ",
    )
    assert bytes(event["body"]) == body


def test_site_form_sent_twice_and_again_six_days_later_is_one_event(
    linked: Linked, db: psycopg.Connection[Any]
) -> None:
    form = {
        "name": "Mira Jansen",
        "email": "mira.jansen@nordwerk.example",
        "company": "Nordwerk AG",
        "phone": None,
        "message": None,
        "consent": True,
        "page": "/kontakt",
    }
    sent = linked.sandbox.post("/_sandbox/forms", json=form)
    assert sent.status_code == 201, sent.text
    msg = sent.json()["id"]
    assert [d["status"] for d in sent.json()["deliveries"]] == [200]
    twice = linked.sandbox.post(f"/_sandbox/forms/{msg}/redeliver").json()["deliveries"]
    # Six days on (a sender's retries last days), re-signed with a fresh timestamp: the ingress's
    # clock is the sandbox's, and the stored event is six days old too.
    linked.sandbox.post("/_sandbox/clock", json={"advance_seconds": 6 * 86400})
    db.execute("UPDATE events SET received_at = received_at - interval '6 days'")
    late = linked.sandbox.post(f"/_sandbox/forms/{msg}/redeliver").json()["deliveries"]
    assert [d["status"] for d in twice + late] == [200, 200]
    [event] = _events(db)
    assert (event["source"], event["event_type"], event["status"]) == (
        "site-form",
        "form.submitted",
        "pending",
    )
    assert (event["delivery_id"], event["duplicate_count"]) == (msg, 2)
    stored = json.loads(bytes(event["body"]))
    assert stored["type"] == "form.submitted"
    assert stored["data"] == form
    assert stored["timestamp"].endswith("Z")
    metrics = linked.ingress.get("/metrics").text
    assert 'followup_ingress_duplicates_total{source="site-form"} 2' in metrics
