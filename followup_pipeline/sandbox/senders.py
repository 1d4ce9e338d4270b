"""The site form's and the payment provider's webhooks, sent as their real senders send them.

``site-form`` is a Standard Webhooks sender as Svix is: headers ``webhook-id``,
``webhook-timestamp`` and ``webhook-signature`` (``v1,<base64 HMAC-SHA256 of
{id}.{timestamp}.{body}>`` keyed with the base64-decoded ``whsec_`` secret); a 2xx within 15 s is
success, anything else (a 3xx too, a timeout, no connection) is retried on Svix's schedule:
immediately, then 5 s, 5 min, 30 min, 2 h, 5 h, 10 h and 10 h after each failure (docs.svix.com/
retries), then the message has failed.

``payment`` is signed as Stripe signs: ``Stripe-Signature: t=<timestamp>,v1=<hex HMAC-SHA256 of
{timestamp}.{body}>`` keyed with the ``whsec_…`` string's own bytes. Stripe retries a non-2xx
with exponential backoff for up to three days and publishes no intervals: here they double from a
minute up to 12 hours, while within three days of the first attempt (15 attempts, the last
after about 65 hours).

A message keeps its id and its exact bytes; every attempt is signed afresh with the sandbox
clock's time, as a real retry is (so one days later is still within a receiver's 5-minute
tolerance). Retries wait on the sandbox's clock: a job looks for due messages every
``sender_tick_s``, so moving the clock (``POST /_sandbox/clock``) brings a retry on at once, and
nothing blocks the event loop. A redelivery (a person pressing "resend" in the vendor's dashboard)
is one more attempt of the same message, outside its schedule.

The signatures are computed here, apart from the ingress's code, so that the tests check one
against the other.
"""

import asyncio
import base64
import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import httpx

from followup_pipeline.sandbox.config import SandboxConfig

if TYPE_CHECKING:
    from followup_pipeline.sandbox.clock import Clock
    from followup_pipeline.sandbox.webhooks import WebhookDispatcher

SITE_FORM = "site-form"
PAYMENT = "payment"
#: Svix's schedule: the wait before each attempt, counted from the failure of the one before.
SVIX_SCHEDULE_S = (0.0, 5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 36000.0)
#: Stripe retries for up to three days.
STRIPE_RETRY_SPAN_S = 3 * 86400.0
#: Svix waits 15 s for an answer; Stripe publishes no figure, and gets the same here.
TIMEOUT = httpx.Timeout(15.0, connect=5.0)
TOTAL_TIMEOUT_S = 15.0
#: The status recorded when no answer came (refused, reset, timed out): retried.
NO_ANSWER = 0
#: How many delivery records are kept for ``GET /_sandbox/forms`` and ``/payments``.
HISTORY = 1000


def _stripe_schedule() -> tuple[float, ...]:
    """Immediately, then waits doubling from a minute up to 12 hours, within three days."""
    delays, total, wait = [0.0], 0.0, 60.0
    while total + wait <= STRIPE_RETRY_SPAN_S:
        delays.append(wait)
        total += wait
        wait = min(wait * 2, 12 * 3600.0)
    return tuple(delays)


STRIPE_SCHEDULE_S = _stripe_schedule()


def standard_headers(secret: str, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three Standard Webhooks headers of one attempt."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": f"v1,{digest}",
    }


def stripe_header(secrets: list[str], timestamp: int, body: bytes) -> dict[str, str]:
    """``Stripe-Signature`` of one attempt: one ``v1`` per active secret."""
    signed = f"{timestamp}.".encode() + body
    signatures = [
        "v1=" + hmac.new(secret.encode("utf-8"), signed, hashlib.sha256).hexdigest()
        for secret in secrets
    ]
    return {"Stripe-Signature": ",".join([f"t={timestamp}", *signatures])}


@dataclass(frozen=True)
class Sender:
    """How one sender signs, retries and names itself."""

    source: str
    schedule: tuple[float, ...]
    user_agent: str
    sign: Callable[[str, int, bytes], dict[str, str]]


@dataclass
class Message:
    """One message of a sender: its id and bytes (the same on every attempt), and its state."""

    source: str
    id: str
    body: bytes
    created: datetime
    attempts: int = 0
    #: When the next attempt of its schedule is due; None once delivered or failed.
    due: datetime | None = None
    #: ``pending``, ``delivered`` (a 2xx) or ``failed`` (its schedule spent).
    outcome: str = "pending"
    #: A redelivery asked for, sent at the next flush.
    resend: bool = False

    def describe(self) -> dict[str, Any]:
        """As the control API and the state file show it."""
        return {
            "source": self.source,
            "id": self.id,
            "body": self.body.decode("utf-8"),
            "created": self.created.isoformat(),
            "attempts": self.attempts,
            "due": None if self.due is None else self.due.isoformat(),
            "outcome": self.outcome,
            "resend": self.resend,
        }


class Senders:
    """The site form's and the payment provider's outgoing messages, their retries and history.

    They go beside the EspoCRM webhooks' target (the dispatcher's URL, which the control API can
    change), its last path segment replaced by the source: ``…/webhooks/espocrm`` →
    ``…/webhooks/site-form``; without one they wait."""

    def __init__(
        self, config: SandboxConfig, clock: "Clock", dispatcher: "WebhookDispatcher"
    ) -> None:
        self.clock = clock
        self.dispatcher = dispatcher
        site_form, payment = config.site_form_secret, config.payment_secret
        self.senders = {
            SITE_FORM: Sender(
                SITE_FORM,
                SVIX_SCHEDULE_S,
                "Svix-Webhooks/1.0 (sandbox)",
                lambda i, t, b: standard_headers(site_form.get_secret_value(), i, t, b),
            ),
            PAYMENT: Sender(
                PAYMENT,
                STRIPE_SCHEDULE_S,
                "Stripe/1.0 (sandbox)",
                lambda i, t, b: stripe_header([payment.get_secret_value()], t, b),
            ),
        }
        self._lock: asyncio.Lock | None = None
        self.reset()

    def reset(self) -> None:
        """No message, no history."""
        self.messages: dict[str, Message] = {}
        self.deliveries: list[dict[str, Any]] = []

    def target(self, source: str) -> str | None:
        """Where ``source``'s webhooks go: beside the EspoCRM webhooks' target."""
        url = self.dispatcher.url
        if not url:
            return None
        base, _, _ = url.rstrip("/").rpartition("/")
        return f"{base}/{source}"

    def send(self, source: str, message_id: str, body: bytes) -> Message:
        """Queue a new message, its first attempt due now."""
        now = self.clock.now()
        message = Message(source, message_id, body, now, due=now)
        self.messages[message_id] = message
        return message

    def redeliver(self, message_id: str, source: str | None = None) -> Message | None:
        """Ask for one more attempt of a message (same id and bytes, signed afresh) at the next
        flush; its own schedule goes on as it was. None when there is no such message."""
        message = self.messages.get(message_id)
        if message is None or (source is not None and message.source != source):
            return None
        message.resend = True
        return message

    def restore(self, item: dict[str, Any]) -> None:
        """A message kept in the state file (``Message.describe``)."""
        due = item.get("due")
        self.messages[item["id"]] = Message(
            source=item["source"],
            id=item["id"],
            body=str(item["body"]).encode("utf-8"),
            created=datetime.fromisoformat(item["created"]),
            attempts=int(item["attempts"]),
            due=None if due is None else datetime.fromisoformat(due),
            outcome=str(item["outcome"]),
            resend=bool(item.get("resend", False)),
        )

    async def run(self, tick_s: float) -> None:
        """The senders' job: every ``tick_s``, send what is due by the sandbox's clock."""
        while True:
            await asyncio.sleep(tick_s)
            await self.flush()

    async def flush(self, only: str | None = None) -> list[dict[str, Any]]:
        """Send the redeliveries asked for and the attempts that are due (of message ``only``
        alone, if given); one attempt each; the delivery records."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            now = self.clock.now()
            chosen = [
                m
                for m in self.messages.values()
                if (only is None or m.id == only)
                and (m.resend or (m.due is not None and m.due <= now))
            ]
            results: list[dict[str, Any]] = []
            if not chosen:
                return results
            transport = self.dispatcher.transport
            async with httpx.AsyncClient(timeout=TIMEOUT, transport=transport) as client:
                for message in chosen:
                    url = self.target(message.source)
                    if url is None:
                        continue  # no target yet: it waits, as a sender's queue would
                    if message.resend:
                        message.resend = False
                        results.append(await self._attempt(client, url, message, again=True))
                    if message.due is not None and message.due <= now:
                        results.append(await self._attempt(client, url, message, again=False))
            return results

    async def _attempt(
        self, client: httpx.AsyncClient, url: str, message: Message, *, again: bool
    ) -> dict[str, Any]:
        sender = self.senders[message.source]
        status = await self._post(client, url, sender, message)
        delivered = 200 <= status < 300
        if again:
            outcome = "success" if delivered else "failed"
        else:
            message.attempts += 1
            if delivered:
                message.due, message.outcome, outcome = None, "delivered", "success"
            elif message.attempts < len(sender.schedule):
                # Each wait starts from the failure of the attempt before.
                wait = timedelta(seconds=sender.schedule[message.attempts])
                message.due, outcome = self.clock.now() + wait, "retry"
            else:
                message.due, message.outcome, outcome = None, "failed", "failed"
        entry = {
            "source": message.source,
            "id": message.id,
            "attempt": message.attempts,
            "redelivery": again,
            "status": status,
            "outcome": outcome,
            "at": self.clock.now().isoformat(),
        }
        self.deliveries.append(entry)
        del self.deliveries[:-HISTORY]
        return entry

    async def _post(
        self, client: httpx.AsyncClient, url: str, sender: Sender, message: Message
    ) -> int:
        stamp = int(self.clock.now().timestamp())
        headers = {
            "Content-Type": "application/json",
            "User-Agent": sender.user_agent,
            **sender.sign(message.id, stamp, message.body),
        }
        try:
            async with asyncio.timeout(TOTAL_TIMEOUT_S):
                response = await client.post(url, content=message.body, headers=headers)
        except (httpx.HTTPError, TimeoutError):
            return NO_ANSWER
        return response.status_code
