"""The ingress fuzzed over real HTTP into a real Postgres: its headers under each of the three
signature schemes (EspoCRM's ``Signature`` and legacy ``X-Signature``, Standard Webhooks',
Stripe's), and its signed bodies, per source.

Shown: no answer is a 5xx; a delivery no configured secret signed changes no row of any table;
a signed delivery writes one row of ``events`` (or counts a duplicate) and nothing else, an event
when its body is what its source sends and a dead letter keeping the raw body when it is not;
and a signed site form or payment that makes no lead ends as a dead letter at once, through the
lead intake's worker. ``test_hostile.py`` holds the hostile bodies' own cases.

The signatures are made here from each scheme's specification, not by the ingress's helpers.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import psycopg
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from psycopg import sql

from followup_pipeline.defs.lead_intake.normalise import LeadNormaliser
from followup_pipeline.domain.leads import (
    PAID_CHECKOUT,
    PAID_LATER,
    LeadRejected,
    from_payment,
    from_site_form,
)
from followup_pipeline.engine.worker import EventWorker
from followup_pipeline.store.events import delivery_key

from .conftest import (
    CREATE_HOOK,
    DELETE_HOOK,
    FORM_SECRET,
    OLD_FORM_SECRET,
    STAGE_HOOK,
    IngressFactory,
    ingress_settings,
)

SITE_SECRET = "whsec_" + base64.b64encode(b"the-site-forms-secret-32-bytes!!").decode()
PAY_SECRET = "whsec_fuzzPaymentEndpointSecret0001"
OLD_PAY_SECRET = "whsec_fuzzPaymentEndpointSecret0000"
WRONG_STANDARD = "whsec_" + base64.b64encode(b"nobody-configured-this-secret-32").decode()
MAX_BODY = 8192
SETTINGS: dict[str, Any] = {
    "standard_webhooks": {"forms": [FORM_SECRET, OLD_FORM_SECRET], "site-form": [SITE_SECRET]},
    "stripe_webhooks": {"payment": [PAY_SECRET, OLD_PAY_SECRET]},
    "ingress_max_body_bytes": MAX_BODY,
}
HOOKS = (STAGE_HOOK, CREATE_HOOK, DELETE_HOOK)
DEPTH_LIMIT = 64

# ---------------------------------------------------------------- bodies

TEXT = st.text(st.characters(codec=None, categories=None), max_size=20) | st.sampled_from(
    ["", "\x00", "\ud800", "é", "💥", "evt_1", "form.submitted", PAID_CHECKOUT, "x" * 300]
)
SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | TEXT
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)


def near(template: Any) -> st.SearchStrategy[Any]:
    """Values close to ``template``: each field kept, left out or hostile; a strategy in the
    template stands for itself alone."""
    if isinstance(template, st.SearchStrategy):
        return template
    if isinstance(template, dict):
        fields = {key: near(value) for key, value in template.items()}
        return st.fixed_dictionaries(fields) | st.fixed_dictionaries({}, optional=fields) | JSON
    if isinstance(template, list):
        return st.lists(near(template[0]), max_size=3) | JSON
    return st.just(template) | SCALARS


ESPO_ITEM = {"id": "6650a1b2c3d4e5f01", "stage": "Proposal", "name": "ACME", "accountName": "A"}
SITE_FORM: dict[str, Any] = {
    "type": "form.submitted",
    "timestamp": "2026-03-02T09:15:22Z",
    "data": {
        "name": "Katrin Brandt",
        "email": "k.brandt@brandt-moebel.example",
        "company": "Brandt Möbel",
        "phone": "+49 30 1234",
        "message": "Bitte um Rückruf.",
        "consent": True,
        "page": "/kontakt",
    },
}
PAYMENT = {
    "id": st.uuids().map(lambda u: f"evt_{u.hex}") | SCALARS,
    "type": st.sampled_from([PAID_CHECKOUT, PAID_LATER, "charge.refunded"]) | SCALARS,
    "data": {
        "object": {
            "payment_status": st.sampled_from(["paid", "unpaid"]) | SCALARS,
            "amount_total": 12900,
            "currency": st.sampled_from(["eur", "", None, 978, "eur\x00"]) | st.text(),
            "customer_details": {"email": "a.b@example.com", "name": "A B", "phone": "+49 1"},
        }
    },
}


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def encoded(values: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    """The values as JSON (UTF-8, or UTF-16 as JSON allows), and bodies that are no JSON."""
    text = values.map(json.dumps)
    return (
        text.map(str.encode)
        | text.map(lambda t: t.encode("utf-16"))
        | st.binary(max_size=30)
        | st.integers(DEPTH_LIMIT - 2, DEPTH_LIMIT + 2).map(nested)
        | st.sampled_from([b"", b"null", b"{", b"\xff\xfe\x00", b"1" * 4400, nested(1500)])
    )


BODIES = encoded(JSON | near([ESPO_ITEM]) | near(SITE_FORM) | near(PAYMENT))


def _depth(value: Any) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        current, depth = stack.pop()
        if isinstance(current, list | dict):
            deepest = max(deepest, depth)
            children = current.values() if isinstance(current, dict) else current
            stack.extend((child, depth + 1) for child in children)
    return deepest


def sent_as_its_source_sends(source: str, body: bytes) -> bool:
    """Whether ``body`` is what ``source`` sends (docs: EspoCRM an array of objects, the others
    an object, Stripe's with its string id), as JSON no deeper than the ingress reads."""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return False
    if _depth(value) > DEPTH_LIMIT:
        return False
    if source == "espocrm":
        return isinstance(value, list) and all(isinstance(item, dict) for item in value)
    if not isinstance(value, dict):
        return False
    event_id = value.get("id")
    return source != "payment" or (isinstance(event_id, str) and event_id != "")


# ---------------------------------------------------------------- signatures, from the specs


def _hmac(key: bytes, content: bytes) -> bytes:
    return hmac.new(key, content, hashlib.sha256).digest()


def espocrm_current(hook_id: str, secret: str, body: bytes) -> bytes:
    digest = _hmac(secret.encode(), body).hex()
    return base64.b64encode(f"{hook_id}:{digest}".encode())


def espocrm_legacy(hook_id: str, secret: str, body: bytes) -> bytes:
    return base64.b64encode(hook_id.encode() + b":" + _hmac(secret.encode(), body))


def standard(
    secret: str, msg_id: bytes, stamp: bytes, body: bytes, version: bytes = b"v1"
) -> bytes:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    return version + b"," + base64.b64encode(_hmac(key, msg_id + b"." + stamp + b"." + body))


def stripe(secret: str, stamp: bytes, body: bytes) -> bytes:
    return _hmac(secret.encode(), stamp + b"." + body).hex().encode()


Headers = list[tuple[str, bytes]]


@dataclass(frozen=True)
class Attempt:
    """One delivery: where, what, with which headers, and whether a configured secret signed it
    (None: a valid signature beside a wrong one, where refusing and accepting are both right)."""

    case: str
    path: str
    body: bytes
    headers: Headers
    signed: bool | None


@dataclass(frozen=True)
class Knobs:
    """What a case of headers varies besides the body: a garbage value, how far a timestamp
    is off, which configured secret or webhook signs, odd letter case, an odd timestamp."""

    garbage: bytes = b"x"
    off: int = 310
    pick: int = 0
    flips: int = 0
    odd_stamp: bytes = b"1e9"


#: Header values as a sender could put them on the wire (no control characters).
GARBAGE = st.binary(max_size=60).map(
    lambda raw: bytes(b if 0x21 <= b <= 0x7E or b >= 0x80 else 0x2A for b in raw)
) | st.sampled_from([b"v1,", b"t=", b"=", b",,,", b"\xe9\xff"])
#: An overlong header value (20 KB: the server reads it, the check must refuse it).
OVERLONG = b"A" * 20_000
KNOBS = st.builds(
    Knobs,
    garbage=GARBAGE,
    off=(st.integers(310, 10**10) | st.sampled_from([301, 10**11])).flatmap(
        lambda off: st.sampled_from([off, -off])
    ),
    pick=st.integers(0, 5),
    flips=st.integers(0, 2**20),
    odd_stamp=st.sampled_from([b"0", b"+", b".0", b"9" * 13, b"0x10", b"1e9", b" 1"]) | GARBAGE,
)
Cases = dict[str, tuple[Headers, bool | None]]


def _odd_case(name: str, flips: int) -> str:
    return "".join(c.upper() if flips >> i & 1 else c for i, c in enumerate(name))


def _odd(stamp: bytes, knobs: Knobs) -> bytes:
    """An odd timestamp: the right one with a leading zero or plus, a fraction, a space; or no
    number of seconds at all."""
    odd = {b"0": b"0" + stamp, b"+": b"+" + stamp, b".0": stamp + b".0", b" 1": stamp + b" 1"}
    return odd.get(knobs.odd_stamp, knobs.odd_stamp)


def espocrm_cases(body: bytes, knobs: Knobs) -> tuple[str, Cases]:
    hook_id, _, secret = HOOKS[knobs.pick % len(HOOKS)]
    other_id = HOOKS[(knobs.pick + 1) % len(HOOKS)][0]
    current, legacy = espocrm_current(hook_id, secret, body), espocrm_legacy(hook_id, secret, body)
    garbage = knobs.garbage
    return "/webhooks/espocrm", {
        "missing": ([], False),
        "empty": ([("Signature", b"")], False),
        "garbage": ([("Signature", garbage)], False),
        "overlong": ([("Signature", OVERLONG)], False),
        "garbage_legacy": ([("X-Signature", garbage)], False),
        "non_ascii": ([("Signature", b"\xe9" + current)], False),
        "wrong_secret": ([("Signature", espocrm_current(hook_id, "wrong", body))], False),
        "other_body": ([("Signature", espocrm_current(hook_id, secret, body + b" "))], False),
        "unknown_hook": (
            [("Signature", espocrm_current("ffffffffffffffff0", secret, body))],
            False,
        ),
        "crossed_hook": ([("Signature", espocrm_current(other_id, secret, body))], False),
        "truncated": ([("Signature", current[:-4])], False),
        "legacy_as_current": ([("Signature", legacy)], False),
        "current_as_legacy": ([("X-Signature", current)], False),
        "legacy_wrong_secret": ([("X-Signature", espocrm_legacy(hook_id, "wrong", body))], False),
        "current": ([("Signature", current)], True),
        "legacy": ([("X-Signature", legacy)], True),
        "current_and_garbage_legacy": ([("Signature", current), ("X-Signature", garbage)], True),
        "odd_case": ([(_odd_case("signature", knobs.flips), current)], True),
        "good_then_bad": ([("Signature", current), ("Signature", garbage)], None),
        "bad_then_good": ([("Signature", garbage), ("Signature", current)], None),
        "bad_current_good_legacy": ([("Signature", garbage), ("X-Signature", legacy)], None),
    }


def standard_cases(body: bytes, knobs: Knobs) -> tuple[str, Cases]:
    source, secrets = sorted(SETTINGS["standard_webhooks"].items())[knobs.pick % 2]
    secret = secrets[knobs.pick % len(secrets)]
    key = base64.b64decode(secret.removeprefix("whsec_"))
    msg_id = f"msg_{uuid.uuid4().hex}".encode()
    now = int(time.time())
    stamp, off = str(now).encode(), str(now + knobs.off).encode()
    odd = _odd(stamp, knobs)
    good = standard(secret, msg_id, stamp, body)
    long_id, odd_id = msg_id + b"x" * 5000, msg_id + "é".encode()

    def headers(
        msg: bytes | None = msg_id, at: bytes | None = stamp, sig: bytes | None = good
    ) -> Headers:
        named = {"webhook-id": msg, "webhook-timestamp": at, "webhook-signature": sig}
        return [(name, value) for name, value in named.items() if value is not None]

    signed = msg_id + b"." + stamp + b"." + body
    hex_digest = _hmac(key, signed).hex().encode()
    keyed_with_the_text = base64.b64encode(_hmac(secret.encode(), signed))
    return f"/webhooks/{source}", {
        "missing_id": (headers(msg=None), False),
        "missing_timestamp": (headers(at=None), False),
        "missing_signature": (headers(sig=None), False),
        "empty_signature": (headers(sig=b""), False),
        "garbage_signature": (headers(sig=knobs.garbage), False),
        "overlong_signature": (headers(sig=b"v1," + OVERLONG), False),
        "stale_or_future": (headers(at=off, sig=standard(secret, msg_id, off, body)), False),
        "odd_timestamp": (headers(at=odd, sig=standard(secret, msg_id, odd, body)), False),
        "wrong_secret": (headers(sig=standard(WRONG_STANDARD, msg_id, stamp, body)), False),
        "secret_not_decoded": (headers(sig=b"v1," + keyed_with_the_text), False),
        "other_body": (headers(sig=standard(secret, msg_id, stamp, body + b" ")), False),
        "other_id": (headers(msg=msg_id + b"2"), False),
        "other_timestamp": (headers(at=str(now + 1).encode()), False),
        "v2": (headers(sig=standard(secret, msg_id, stamp, body, b"v2")), False),
        "hex": (headers(sig=b"v1," + hex_digest), False),
        "several_wrong": (headers(sig=b"v1,AAAA " + knobs.garbage + b" v1,Zm9v"), False),
        "non_ascii": (headers(sig=good + b"\xe9"), False),
        "valid": (headers(), True),
        "several_one_good": (headers(sig=b"v1,Zm9v " + good + b" v2,x"), True),
        "overlong_id": (headers(msg=long_id, sig=standard(secret, long_id, stamp, body)), True),
        "odd_case": ([(_odd_case(n, knobs.flips), v) for n, v in headers()], True),
        "two_signature_headers": ([*headers(), ("webhook-signature", knobs.garbage)], None),
        # The server reads header bytes as Latin-1: whether these match is the sender's luck.
        "non_ascii_id": (headers(msg=odd_id, sig=standard(secret, odd_id, stamp, body)), None),
    }


def stripe_cases(body: bytes, knobs: Knobs) -> tuple[str, Cases]:
    secret = (PAY_SECRET, OLD_PAY_SECRET)[knobs.pick % 2]
    now = int(time.time())
    t, later, off = str(now).encode(), str(now + 7).encode(), str(now + knobs.off).encode()
    good = stripe(secret, t, body)
    odd = _odd(t, knobs)
    unprefixed = _hmac(secret.removeprefix("whsec_").encode(), t + b"." + body).hex().encode()

    def header(*elements: bytes) -> Headers:
        return [("Stripe-Signature", b",".join(elements))]

    return "/webhooks/payment", {
        "missing": ([], False),
        "empty": (header(b""), False),
        "garbage": (header(knobs.garbage), False),
        "no_t": (header(b"v1=" + good), False),
        "no_v1": (header(b"t=" + t), False),
        "v0_only": (header(b"t=" + t, b"v0=" + good), False),
        "v0_good_v1_bad": (header(b"t=" + t, b"v0=" + good, b"v1=" + b"0" * 64), False),
        "wrong_secret": (header(b"t=" + t, b"v1=" + stripe("whsec_wrong", t, body)), False),
        "secret_unprefixed": (header(b"t=" + t, b"v1=" + unprefixed), False),
        "other_body": (header(b"t=" + t, b"v1=" + stripe(secret, t, body + b" ")), False),
        "other_t": (header(b"t=" + later, b"v1=" + good), False),
        "stale_or_future": (header(b"t=" + off, b"v1=" + stripe(secret, off, body)), False),
        "odd_t": (
            header(b"t=" + odd, b"v1=" + stripe(secret, odd, body)),
            False,
        ),
        "first_t_counts": (header(b"t=" + later, b"t=" + t, b"v1=" + good), False),
        "upper_hex": (header(b"t=" + t, b"v1=" + good.upper()), False),
        "non_ascii": (header(b"t=" + t, b"v1=" + good + b"\xe9"), False),
        "overlong": (header(b"t=" + t, *[b"v1=" + b"0" * 64] * 400), False),
        "valid": (header(b"t=" + t, b"v1=" + good), True),
        "several_v1_one_good": (header(b"t=" + t, b"v1=" + b"0" * 64, b"v1=" + good), True),
        "extra_elements": (header(b"t=" + t, b"v1=" + good, b"v0=abc", b"foo=bar"), True),
        "second_t_ignored": (header(b"t=" + t, b"v1=" + good, b"t=" + later), True),
        "odd_case": (
            [(_odd_case("stripe-signature", knobs.flips), header(b"t=" + t, b"v1=" + good)[0][1])],
            True,
        ),
        "spaces": (header(b"t=" + t, b" v1=" + good), None),
        "two_headers": ([*header(knobs.garbage), *header(b"t=" + t, b"v1=" + good)], None),
    }


SCHEMES: dict[str, Callable[[bytes, Knobs], tuple[str, Cases]]] = {
    "espocrm": espocrm_cases,
    "standard": standard_cases,
    "stripe": stripe_cases,
}
CASES = [(scheme, case) for scheme, make in SCHEMES.items() for case in make(b"", Knobs())[1]]
#: A body each scheme's source reads as an event.
TYPICAL = {
    "espocrm": b'[{"id": "6650a1b2c3d4e5f01", "stage": "Won"}]',
    "standard": b'{"type": "form.submitted", "data": {}}',
    "stripe": b'{"id": "evt_typical", "type": "charge.refunded"}',
}
TOO_LARGE = b"[" + b"0," * MAX_BODY + b"0]"


def attempt(scheme: str, case: str, body: bytes, knobs: Knobs) -> Attempt:
    path, cases = SCHEMES[scheme](body, knobs)
    headers, signed = cases[case]
    return Attempt(f"{scheme}:{case}", path, body, headers, signed)


def every_case(test: Callable[..., None]) -> Callable[..., None]:
    """The test run once with each case of each scheme, on a body its source reads."""
    for scheme, case in CASES:
        test = example(scheme_case=(scheme, case), body=TYPICAL[scheme], knobs=Knobs())(test)
    return test


# ---------------------------------------------------------------- the database, before and after


class Tables:
    """Every table of the schema counted, and the duplicates the events counted."""

    def __init__(self, db: psycopg.Connection[Any]) -> None:
        self.db = db
        rows = db.execute(
            "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema = 'followup' AND table_type = 'BASE TABLE' ORDER BY 1"
        ).fetchall()
        counts = [
            sql.SQL("(SELECT count(*) FROM {}) AS {}").format(
                sql.Identifier("followup", row["table_name"]), sql.Identifier(row["table_name"])
            )
            for row in rows
        ]
        duplicates = sql.SQL("(SELECT coalesce(sum(duplicate_count), 0) FROM followup.events)")
        self.query = sql.SQL("SELECT {}, {} AS duplicates").format(
            sql.SQL(", ").join(counts), duplicates
        )

    def counts(self) -> dict[str, int]:
        row = self.db.execute(self.query).fetchone()
        assert row is not None
        return {name: int(value) for name, value in row.items()}


def _event(db: psycopg.Connection[Any], answer: httpx.Response) -> dict[str, Any]:
    row = db.execute(
        "SELECT * FROM events WHERE id = %s", (int(answer.json()["event"].split(":")[1]),)
    ).fetchone()
    assert row is not None
    return dict(row)


def _named(answer: httpx.Response) -> bool:
    """Whether the answer names a stored event (200, or 400 with its dead letter)."""
    try:
        return answer.status_code in (200, 400) and "event" in answer.json()
    except ValueError:
        return False


def _check_stored(event: dict[str, Any], answer: httpx.Response, body: bytes) -> None:
    """The event an answer names holds the body, or is the message the body names again."""
    if answer.status_code == 200 and answer.json()["duplicate"] and event["source"] == "payment":
        # Stripe's event id names the message: a body of the same id is its redelivery.
        assert event["delivery_id"] == delivery_key(json.loads(body)["id"])
    else:
        assert bytes(event["body"]) == body


def _post(client: httpx.Client, path: str, body: bytes, headers: Headers) -> httpx.Response:
    """One delivery on a connection of its own, as a webhook sender makes it (and without
    waiting on a delayed ACK of a kept-alive one)."""
    sent = [(name.encode(), value) for name, value in [*headers, ("Connection", b"close")]]
    return client.post(path, content=body, headers=sent)


#: Why the ingress refuses a delivery with 401 (app.py).
REFUSALS = {"missing_signature", "bad_signature", "unknown_webhook"}
REFUSALS |= {"bad_timestamp", "stale_timestamp"}
FUZZ = settings(
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.large_base_example,
        HealthCheck.data_too_large,
    ],
)


def test_fuzzed_headers_store_nothing_unsigned_and_never_get_a_5xx(
    make_ingress: IngressFactory, db: psycopg.Connection[Any]
) -> None:
    tables = Tables(db)
    with make_ingress(**SETTINGS) as client:

        @settings(FUZZ, max_examples=180)
        @given(
            scheme_case=st.sampled_from(CASES),
            body=BODIES | st.just(TOO_LARGE),
            knobs=KNOBS,
        )
        @every_case
        def deliver(scheme_case: tuple[str, str], body: bytes, knobs: Knobs) -> None:
            sent = attempt(*scheme_case, body, knobs)
            before = tables.counts()
            answer = _post(client, sent.path, body, sent.headers)
            after = tables.counts()
            assert answer.status_code < 500, (sent.case, answer.status_code, answer.text)
            accepted = _named(answer)
            if answer.status_code == 401:
                assert answer.json()["error"] in REFUSALS, (sent.case, answer.text)
            if sent.signed is False or len(body) > MAX_BODY:
                assert 400 <= answer.status_code < 500, (sent.case, answer.text)
                assert not accepted, (sent.case, answer.text)
            elif sent.signed:
                assert accepted, (sent.case, answer.status_code, answer.text)
            if accepted:
                _check_stored(_event(db, answer), answer, body)
            else:
                assert after == before, sent.case

        deliver()


@dataclass(frozen=True)
class Source:
    """A configured source and how a delivery of it is signed."""

    name: str
    sign: Callable[[bytes], Headers]
    handled: bool

    @property
    def path(self) -> str:
        return "/webhooks/espocrm" if self.name == "espocrm" else f"/webhooks/{self.name}"


def _espocrm_headers(hook: tuple[str, str, str]) -> Callable[[bytes], Headers]:
    return lambda body: [("Signature", espocrm_current(hook[0], hook[2], body))]


def _standard_headers(secret: str) -> Callable[[bytes], Headers]:
    def sign(body: bytes) -> Headers:
        msg_id, stamp = f"msg_{uuid.uuid4().hex}".encode(), str(int(time.time())).encode()
        signature = standard(secret, msg_id, stamp, body)
        return [
            ("webhook-id", msg_id),
            ("webhook-timestamp", stamp),
            ("webhook-signature", signature),
        ]

    return sign


def _stripe_headers(body: bytes) -> Headers:
    t = str(int(time.time())).encode()
    return [("Stripe-Signature", b"t=" + t + b",v1=" + stripe(PAY_SECRET, t, body))]


BODIES_OF = {
    "espocrm": encoded(near([ESPO_ITEM]) | JSON),
    "forms": encoded(near(SITE_FORM) | JSON),
    "site-form": encoded(near(SITE_FORM) | JSON),
    "payment": encoded(near(PAYMENT) | JSON),
}
SOURCES = [
    *(Source("espocrm", _espocrm_headers(hook), True) for hook in HOOKS),
    Source("forms", _standard_headers(OLD_FORM_SECRET), False),
    Source("site-form", _standard_headers(SITE_SECRET), True),
    Source("payment", _stripe_headers, True),
]


def test_fuzzed_signed_bodies_are_events_or_dead_letters_keeping_the_raw_body(
    make_ingress: IngressFactory, db: psycopg.Connection[Any]
) -> None:
    tables = Tables(db)
    with make_ingress(**SETTINGS) as client:

        @settings(FUZZ, max_examples=140)
        @given(
            sent=st.sampled_from(SOURCES).flatmap(
                lambda s: st.tuples(st.just(s), BODIES_OF[s.name])
            )
        )
        @example(sent=(SOURCES[0], TYPICAL["espocrm"]))
        @example(sent=(SOURCES[1], b'[{"id": "a\\u0000b"}, {"id": 5}, {}]'))
        @example(sent=(SOURCES[2], b'[{"id": "d1"}, []]'))
        @example(sent=(SOURCES[3], json.dumps(SITE_FORM).encode("utf-16")))
        @example(sent=(SOURCES[4], b'{"type": "\\ud800", "data": []}'))
        @example(sent=(SOURCES[4], b'["form.submitted"]'))
        @example(sent=(SOURCES[5], TYPICAL["stripe"]))
        @example(sent=(SOURCES[5], b'{"id": "", "type": "checkout.session.completed"}'))
        @example(sent=(SOURCES[5], nested(DEPTH_LIMIT + 1)))
        def deliver(sent: tuple[Source, bytes]) -> None:
            source, body = sent
            before = tables.counts()
            answer = _post(client, source.path, body, source.sign(body))
            after = tables.counts()
            valid = sent_as_its_source_sends(source.name, body)
            assert answer.status_code == (200 if valid else 400), (answer.status_code, answer.text)
            changed = {name for name in after if after[name] != before[name]}
            assert changed in ({"events"}, {"duplicates"}), changed
            assert (
                after["events"] + after["duplicates"] == before["events"] + before["duplicates"] + 1
            )
            event = _event(db, answer)
            assert event["source"] == source.name
            _check_stored(event, answer, body)
            if valid:
                assert event["status"] == ("pending" if source.handled else "unhandled")
                assert event["dead_step"] is None
            else:
                assert answer.json()["error"] == "unparseable"
                assert (event["status"], event["dead_step"]) == ("dead", "ingress")
                assert event["last_error"]

        deliver()


PAID = json.dumps(
    {
        "id": "evt_paid",
        "type": PAID_CHECKOUT,
        "data": {
            "object": {
                "payment_status": "paid",
                "amount_total": 12900,
                "currency": "eur",
                "customer_details": {"email": "a.b@example.com", "name": "A B"},
            }
        },
    }
).encode()


def _form(**data: Any) -> bytes:
    return json.dumps({**SITE_FORM, "data": {**SITE_FORM["data"], **data}}).encode()


def _lead_of(source: str, body: bytes) -> str:
    """What the lead intake makes of a body, by the parsers of ``domain/leads.py``."""
    try:
        lead = (from_site_form if source == "site-form" else from_payment)(body)
    except LeadRejected:
        return "rejected"
    return "no lead" if lead is None else "a lead"


def _work_the_leads(db: psycopg.Connection[Any]) -> dict[str, int]:
    settings_ = ingress_settings(**SETTINGS)
    worker = EventWorker(
        db, LeadNormaliser(db, settings_), settings_, sources=("site-form", "payment")
    )
    return dict(worker.run())


def test_fuzzed_signed_site_forms_and_payments_end_as_leads_or_dead_letters_at_once(
    make_ingress: IngressFactory, db: psycopg.Connection[Any]
) -> None:
    sources = {source.name: source for source in SOURCES}
    with make_ingress(**SETTINGS) as client:

        @settings(FUZZ, max_examples=35)
        @given(
            sent=st.lists(
                st.sampled_from(["site-form", "payment"]).flatmap(
                    lambda name: st.tuples(st.just(name), BODIES_OF[name])
                ),
                min_size=1,
                max_size=4,
            )
        )
        @example(sent=[("site-form", json.dumps(SITE_FORM).encode()), ("payment", PAID)])
        @example(sent=[("site-form", _form(email="no address")), ("site-form", _form(consent=2))])
        @example(sent=[("site-form", _form(name=["x"])), ("site-form", b'{"data": null}')])
        @example(sent=[("payment", PAID.replace(b'"paid"', b'"unpaid"'))])
        @example(sent=[("payment", PAID.replace(b"12900", b"1.5")), ("payment", b'{"id": "e"}')])
        def deliver(sent: list[tuple[str, bytes]]) -> None:
            expected: dict[int, str] = {}
            for name, body in sent:
                source = sources[name]
                answer = _post(client, source.path, body, source.sign(body))
                assert answer.status_code in (200, 400), answer.text
                event_id = _event(db, answer)["id"]
                if answer.status_code == 400:
                    expected[event_id] = "dead at ingress"
                elif not answer.json()["duplicate"]:
                    expected[event_id] = _lead_of(name, body)
            counts = _work_the_leads(db)
            assert not counts.get("events_retried"), counts
            rows = db.execute(
                "SELECT e.id, e.status, e.dead_step, e.last_error, l.lead_id FROM events e"
                " LEFT JOIN lead_events l ON l.event_id = e.id WHERE e.id = ANY(%s)",
                (sorted(expected),),
            ).fetchall()
            for row in rows:
                ended = {
                    ("dead", "ingress", False): "dead at ingress",
                    ("dead", "0:normalise", False): "rejected",
                    ("done", None, True): "a lead",
                    ("done", None, False): "no lead",
                }.get((row["status"], row["dead_step"], row["lead_id"] is not None))
                assert ended == expected[row["id"]], row
                assert row["status"] == "done" or row["last_error"], row

        deliver()


def test_a_signed_paid_checkout_whose_currency_holds_a_nul_is_no_retried_lead(
    make_ingress: IngressFactory, db: psycopg.Connection[Any]
) -> None:
    session = {"payment_status": "paid", "amount_total": 100, "currency": "eur\x00"}
    session["customer_details"] = {"email": "a.b@example.com"}
    body = json.dumps({"id": "evt_nul", "type": PAID_CHECKOUT, "data": {"object": session}})
    with make_ingress(**SETTINGS) as client:
        answer = _post(client, "/webhooks/payment", body.encode(), _stripe_headers(body.encode()))
    assert answer.status_code == 200, answer.text
    counts = _work_the_leads(db)
    [event] = db.execute("SELECT status, dead_step, last_error FROM events").fetchall()
    assert event["status"] in ("done", "dead"), (counts, event)
