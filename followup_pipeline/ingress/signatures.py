"""Webhook signatures, EspoCRM's (current and legacy) and Standard Webhooks', in constant time.

EspoCRM: header ``Signature`` = base64("{webhookId}:{hex hmac_sha256(body, secret)}"); the
pre-9.0 ``X-Signature`` = base64("{webhookId}:" + the raw 32-byte HMAC). The webhook id inside
picks the configured secret and the event type (EspoCRM bodies carry no event name).

Standard Webhooks: ``webhook-id``, ``webhook-timestamp`` (Unix seconds) and ``webhook-signature``
(space-separated ``v1,<base64 hmac>``), signed content ``{id}.{timestamp}.{body}``, secrets
``whsec_<base64>``; several secrets and signatures allow key rotation.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from followup_pipeline.settings import EspoWebhook

#: Standard Webhooks' tolerance between the sender's timestamp and our clock.
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
    """Who signed a delivery: the EspoCRM webhook (its event type) or the Standard Webhooks id."""

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
    # Unix seconds have ten digits for centuries; a longer number is no timestamp (and would
    # overflow the float comparison below).
    if len(stamp) > 12 or not stamp.isascii() or not stamp.lstrip("-").isdigit():
        raise Rejected("bad_timestamp", "webhook-timestamp is not Unix seconds")
    timestamp = int(stamp)
    if abs(now - timestamp) > TOLERANCE_S:
        raise Rejected("stale_timestamp", "webhook-timestamp is more than 5 minutes off")
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
