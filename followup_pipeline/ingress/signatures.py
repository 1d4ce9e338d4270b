"""Webhook signatures, EspoCRM's (current and legacy), Standard Webhooks' and Stripe's, in
constant time.

EspoCRM: header ``Signature`` = base64("{webhookId}:{hex hmac_sha256(body, secret)}"); the
pre-9.0 ``X-Signature`` = base64("{webhookId}:" + the raw 32-byte HMAC). The webhook id inside
picks the configured secret and the event type (EspoCRM bodies carry no event name).

Standard Webhooks: ``webhook-id``, ``webhook-timestamp`` (Unix seconds) and ``webhook-signature``
(space-separated ``v1,<base64 hmac>``), signed content ``{id}.{timestamp}.{body}``, secrets
``whsec_<base64>``; several secrets and signatures allow key rotation.

Stripe: ``Stripe-Signature: t=<Unix seconds>,v1=<hex>[,v1=<hex>…][,v0=<hex>]``, the hex HMAC-SHA256
of ``{t}.{raw body}`` keyed with the endpoint secret's own bytes (the whole ``whsec_…`` string,
not decoded: Stripe's SDKs key it with ``secret.encode("utf-8")``). While a rolled secret is still
active Stripe sends one ``v1`` per active secret; ``v0`` is a test-mode decoy, never trusted.
The event id (``evt_…``), which names the message across retries, is in the body
(``deliveries.py`` reads it).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from followup_pipeline.settings import EspoWebhook

#: Standard Webhooks' and Stripe's tolerance between the sender's timestamp and our clock, either
#: way (Stripe's SDKs default to 300 s).
TOLERANCE_S = 5 * 60
DIGEST_SIZE = hashlib.sha256().digest_size


class Rejected(Exception):
    """The delivery is refused: ``reason`` is a short word for machines, ``status`` HTTP."""

    def __init__(self, reason: str, detail: str, status: int = 401) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
        self.status = status


@dataclass(frozen=True)
class Verified:
    """Who signed a delivery: the EspoCRM webhook (its event type), the Standard Webhooks id, or
    a Stripe endpoint secret (``webhook_id`` empty: Stripe's event id is in the body)."""

    event_type: str | None
    webhook_id: str
    #: The message id a Standard Webhooks sender keeps across retries (``webhook-id``): how a
    #: redelivery is recognised. None for EspoCRM, whose webhook id names a webhook, not a message.
    delivery_id: str | None = None


def _b64(value: str) -> bytes:
    try:
        return base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise Rejected("bad_signature", "signature is not base64") from None


def _sign(secret: bytes, body: bytes) -> bytes:
    return hmac.new(secret, body, hashlib.sha256).digest()


def verify_espocrm(
    headers: Mapping[str, str],
    body: bytes,
    webhooks: Sequence[EspoWebhook],
    *,
    accept_legacy: bool,
) -> Verified:
    """The EspoCRM webhook that signed ``body``; ``Rejected`` if none did."""
    by_id = {hook.id: hook for hook in webhooks}
    current, legacy = headers.get("signature"), headers.get("x-signature")
    if current:
        decoded = _b64(current)
        hook_id, sep, hex_digest = decoded.partition(b":")
        hook = by_id.get(hook_id.decode("utf-8", "replace")) if sep else None
        if hook is None:
            raise Rejected("unknown_webhook", "the signature names no configured webhook")
        expected = _sign(hook.secret.get_secret_value().encode(), body).hex().encode()
        if not hmac.compare_digest(expected, hex_digest):
            raise Rejected("bad_signature", "the signature does not match the body")
        return Verified(hook.event, hook.id)
    if legacy and accept_legacy:
        decoded = _b64(legacy)
        hook_part, digest = decoded[: -DIGEST_SIZE - 1], decoded[-DIGEST_SIZE - 1 :]
        hook = by_id.get(hook_part.decode("utf-8", "replace"))
        if hook is None or not digest.startswith(b":"):
            raise Rejected("unknown_webhook", "the signature names no configured webhook")
        expected = _sign(hook.secret.get_secret_value().encode(), body)
        if not hmac.compare_digest(expected, digest[1:]):
            raise Rejected("bad_signature", "the signature does not match the body")
        return Verified(hook.event, hook.id)
    if legacy:
        raise Rejected("missing_signature", "legacy X-Signature is not accepted; send Signature")
    raise Rejected("missing_signature", "no Signature header")


def _timestamp(stamp: str | None, now: float, name: str) -> int:
    """A signed Unix timestamp, within ``TOLERANCE_S`` of ``now``; ``Rejected`` otherwise."""
    # Unix seconds have ten digits for centuries; a longer number is no timestamp (and would
    # overflow the float comparison below).
    if not stamp or not re.fullmatch(r"-?[0-9]{1,12}", stamp):
        raise Rejected("bad_timestamp", f"{name} is not Unix seconds")
    timestamp = int(stamp)
    if abs(now - timestamp) > TOLERANCE_S:
        raise Rejected("stale_timestamp", f"{name} is more than 5 minutes off")
    return timestamp


def _secret_bytes(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix("whsec_"))


def verify_standard(
    headers: Mapping[str, str], body: bytes, secrets: Sequence[str], *, now: float
) -> Verified:
    """Check a Standard Webhooks delivery against any of ``secrets``; ``Rejected`` if it fails."""
    msg_id = headers.get("webhook-id")
    stamp = headers.get("webhook-timestamp")
    signature_header = headers.get("webhook-signature")
    if not (msg_id and stamp and signature_header):
        raise Rejected(
            "missing_signature", "webhook-id, webhook-timestamp and webhook-signature are required"
        )
    timestamp = _timestamp(stamp, now, "webhook-timestamp")
    signed = f"{msg_id}.{timestamp}.".encode() + body
    offered = []
    for entry in signature_header.split():
        version, _, value = entry.partition(",")
        if version == "v1" and value:
            try:
                offered.append(base64.b64decode(value, validate=True))
            except (binascii.Error, ValueError):
                continue
    matched = False
    for secret in secrets:
        try:
            key = _secret_bytes(secret)
        except (binascii.Error, ValueError):
            continue  # a misconfigured secret matches nothing (doctor names it)
        expected = _sign(key, signed)
        for candidate in offered:
            # No early exit: every pair is compared, so timing says nothing about which matched.
            matched |= hmac.compare_digest(expected, candidate)
    if not matched:
        raise Rejected("bad_signature", "no webhook-signature matches a configured secret")
    return Verified(None, msg_id, delivery_id=msg_id)


def standard_signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value for a body (senders and tests)."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(_sign(_secret_bytes(secret), signed)).decode()


def stripe_signature(secret: str, timestamp: int, body: bytes) -> str:
    """The hex ``v1`` of ``Stripe-Signature`` for a body (senders and tests): HMAC-SHA256 of
    ``{timestamp}.{body}`` keyed with the secret string's own UTF-8 bytes, as Stripe signs."""
    return _sign(secret.encode("utf-8"), f"{timestamp}.".encode() + body).hex()


def verify_stripe(
    headers: Mapping[str, str], body: bytes, secrets: Sequence[str], *, now: float
) -> Verified:
    """Check a Stripe delivery against any of ``secrets``; ``Rejected`` if it fails.

    Every ``v1`` is compared with every configured secret's (during a roll Stripe signs with
    each active secret, and we may hold the old and the new one), without an early exit."""
    header = headers.get("stripe-signature")
    if not header:
        raise Rejected("missing_signature", "no Stripe-Signature header")
    stamps, offered = [], []
    for element in header.split(","):
        prefix, _, value = element.strip().partition("=")
        if prefix == "t":
            stamps.append(value)
        elif prefix == "v1" and value:
            # Hex from Stripe; anything else simply matches nothing.
            offered.append(value.encode("utf-8", "replace"))
    # The first t, as Stripe's SDKs read it: it is inside what is signed, so no other can pass.
    timestamp = _timestamp(stamps[0] if stamps else None, now, "Stripe-Signature's t")
    if not offered:
        raise Rejected("missing_signature", "Stripe-Signature carries no v1 signature")
    matched = False
    for secret in secrets:
        expected = stripe_signature(secret, timestamp, body).encode()
        for candidate in offered:
            # No early exit: every pair is compared, so timing says nothing about which matched.
            matched |= hmac.compare_digest(expected, candidate)
    if not matched:
        raise Rejected("bad_signature", "no v1 signature matches a configured secret")
    return Verified(None, "")
