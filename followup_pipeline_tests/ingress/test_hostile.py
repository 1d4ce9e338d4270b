"""Signed but hostile bodies: the ingress answers 200 or 400 (with a dead letter), never 500."""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

import httpx
import psycopg
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from followup_pipeline.ingress.signatures import standard_signature, stripe_signature
from followup_pipeline.sandbox.webhooks import signatures

from .conftest import FORM_SECRET, STAGE_HOOK, IngressFactory

#: Text as an attacker may put it in JSON: NULs, lone surrogates, control characters, anything.
ANY_TEXT = st.text(st.characters(codec=None, categories=None), max_size=40) | st.text(
    st.sampled_from(["\x00", "\ud800", "\udfff", "\n", "]", "(", "\\", "é", "💥"]), max_size=20
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | ANY_TEXT,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(ANY_TEXT, inner, max_size=5),
    max_leaves=30,
)
#: Shapes close to what EspoCRM sends, so that the items themselves are tried too.
ITEM = st.fixed_dictionaries(
    {"id": ANY_TEXT | st.integers() | st.none()},
    optional={"stage": JSON_VALUES, "name": JSON_VALUES, "accountName": ANY_TEXT},
)
#: Shapes close to a Stripe event, so that its id and type are tried too.
EVENT = st.fixed_dictionaries(
    {"id": ANY_TEXT | st.integers() | st.none()},
    optional={"type": JSON_VALUES, "object": ANY_TEXT, "data": JSON_VALUES},
)
PAY_SECRET = "whsec_hostileEndpointSecret0001"
DEEP = ("[" * 100_000 + "]" * 100_000).encode()
HUGE = json.dumps([{"id": "d1", "name": "x" * 900_000}]).encode()


def _bodies() -> st.SearchStrategy[bytes]:
    encoded = (JSON_VALUES | st.lists(ITEM, max_size=5) | EVENT).map(
        lambda v: json.dumps(v).encode()
    )
    return encoded | st.sampled_from([DEEP, HUGE, b'{"type": "\\ud800x"}', b"\x00\xff"])


def _espocrm(body: bytes) -> dict[str, str]:
    current, _ = signatures(STAGE_HOOK[0], body, STAGE_HOOK[2])
    return {"Signature": current}


def _standard(body: bytes) -> dict[str, str]:
    # A message id per body: one id is one message, whose retries are duplicates of the first.
    msg_id = "msg_" + hashlib.sha256(body).hexdigest()[:24]
    stamp = int(time.time())
    signature = standard_signature(FORM_SECRET, msg_id, stamp, body)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(stamp),
        "webhook-signature": signature,
    }


def _stripe(body: bytes) -> dict[str, str]:
    stamp = int(time.time())
    return {"Stripe-Signature": f"t={stamp},v1={stripe_signature(PAY_SECRET, stamp, body)}"}


def _check(
    client: httpx.Client,
    db: psycopg.Connection[Any],
    path: str,
    body: bytes,
    headers: dict[str, str],
) -> None:
    answer = client.post(path, content=body, headers=headers)
    assert answer.status_code in (200, 400), (answer.status_code, answer.text[:200])
    name = answer.json()["event"]
    row = db.execute("SELECT status FROM events WHERE id = %s", (int(name.split(":")[1]),))
    status = row.fetchone()
    assert status is not None
    if answer.status_code == 400:
        assert answer.json()["error"] == "unparseable"
        assert status == {"status": "dead"}
    else:
        assert status["status"] in ("pending", "unhandled")


def test_hostile_signed_bodies_get_200_or_400_never_500(
    make_ingress: IngressFactory, db: psycopg.Connection[Any]
) -> None:
    with make_ingress(stripe_webhooks={"payment": [PAY_SECRET]}) as client:

        @settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(body=_bodies())
        @example(body=DEEP)
        @example(body=b'{"type": "\\ud800"}')
        @example(body=b'[{"id": "a\\u0000b", "stage": "Proposal"}]')
        @example(body=b'{"id": "evt_\\u0000\\ud800", "type": "\\udfff"}')
        @example(body=b'{"id": "' + b"e" * 5000 + b'"}')
        def post_all(body: bytes) -> None:
            _check(client, db, "/webhooks/espocrm", body, _espocrm(body))
            _check(client, db, "/webhooks/forms", body, _standard(body))
            _check(client, db, "/webhooks/payment", body, _stripe(body))

        post_all()


def test_hostile_nesting_past_the_limit_is_refused_whatever_the_stack(
    ingress: httpx.Client, db: psycopg.Connection[Any]
) -> None:
    body = ("[" * 70 + "]" * 70).encode()
    answer = ingress.post("/webhooks/espocrm", content=body, headers=_espocrm(body))
    assert (answer.status_code, answer.json()["detail"]) == (
        400,
        "not JSON we read: nested deeper than 64",
    )


def test_hostile_an_overlong_timestamp_is_a_bad_timestamp_not_a_500(
    ingress: httpx.Client,
) -> None:
    body = b'{"type": "lead"}'
    headers = {**_standard(body), "webhook-timestamp": "9" * 400}
    answer = ingress.post("/webhooks/forms", content=body, headers=headers)
    assert (answer.status_code, answer.json()["error"]) == (401, "bad_timestamp")
