"""EspoCRM's webhook queue: items batched per webhook, PHP-encoded, signed, retried.

EspoCRM's rules (docs/vendors.md): a JSON array of up to 50 items per request; header ``Signature``
= base64("{id}:{hex hmac}") and legacy ``X-Signature`` = base64("{id}:" + binary hmac); 2xx/3xx is
success, 410 deletes the webhook, 401/403/404/405/408/500/503 are retried (4 attempts in all,
10 minutes apart; a timeout counts as 408), anything else fails at once, and so does a refused
connection, a failed DNS lookup or a reset (status 0): while the ingress is down, its webhooks
are lost for good (``Core/Webhook/Queue.php``, ``Sender.php``). The queue job takes at most
``webhook_queue_portion`` items a run and sends one batch per webhook; ``flush`` from the control
API sends everything queued at once.
"""

import asyncio
import base64
import hashlib
import hmac
import itertools
import json
import math
import random
import time
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import httpx

from followup_pipeline.sandbox.config import SandboxConfig, WebhookSpec

if TYPE_CHECKING:
    from followup_pipeline.sandbox.clock import Clock
    from followup_pipeline.sandbox.faults import FaultBook

RETRIED_STATUSES = frozenset({401, 403, 404, 405, 408, 500, 503})
#: The status recorded when no answer came: refused, no such host, reset. Not retried.
NO_CONNECTION = 0
#: A timeout is recorded as EspoCRM records it: 408, retried.
TIMED_OUT = 408
TIMEOUT = httpx.Timeout(10.0, connect=5.0)
TOTAL_TIMEOUT_S = 10.0
#: How long webhooks kept across a restart wait before they are sent.
RESTORED_GRACE_S = 30.0


def php_json(value: Any) -> bytes:
    """Encode like PHP's ``json_encode`` with default flags: ``\\/`` and ``\\uXXXX`` escapes,
    and floats as PHP writes them (``1000.0`` → ``1000``, ``1e20`` → ``1.0e+20``)."""
    return _php(value).encode("ascii")


def _php(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ",".join(f"{_php(str(k))}:{_php(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_php(v) for v in value) + "]"
    if isinstance(value, float):
        return php_float(value)
    return json.dumps(value, ensure_ascii=True).replace("/", "\\/")


def php_float(number: float) -> str:
    """A float as PHP's ``json_encode`` writes it (serialize_precision -1, precision 17): the
    shortest digits, no ``.0`` on a whole number, an exponent from 1e17 up and below 1e-4."""
    if number != number or number in (float("inf"), float("-inf")):
        return "0"  # PHP refuses NAN and INF (json_encode fails); never sent
    if number == 0:
        return "-0" if math.copysign(1.0, number) < 0 else "0"
    exact = Decimal(repr(number))
    position = exact.adjusted()
    if position >= 17 or position < -4:
        digits = "".join(map(str, exact.normalize().as_tuple().digits))
        sign = "-" if number < 0 else ""
        mantissa = f"{digits[0]}.{digits[1:] or '0'}"
        return f"{sign}{mantissa}e{'+' if position >= 0 else '-'}{abs(position)}"
    if number == int(number):
        return str(int(number))
    return format(exact, "f")


def signatures(webhook_id: str, body: bytes, secret: str) -> tuple[str, str]:
    """The ``Signature`` and legacy ``X-Signature`` header values for a body."""
    digest = hmac.new(secret.encode(), body, hashlib.sha256)
    current = base64.b64encode(f"{webhook_id}:{digest.hexdigest()}".encode()).decode()
    legacy = base64.b64encode(webhook_id.encode() + b":" + digest.digest()).decode()
    return current, legacy


def outcome_of(status: int) -> str:
    """EspoCRM's verdict on a delivery status: success, deleted, retry or failed."""
    if 200 <= status < 400:
        return "success"
    if status == 410:
        return "deleted"
    return "retry" if status in RETRIED_STATUSES else "failed"


@dataclass
class QueueItem:
    """One queued webhook item."""

    number: int
    webhook_id: str
    data: dict[str, Any]
    attempts: int = 0
    process_at: float = 0.0


class WebhookDispatcher:
    """Queues items per configured webhook and delivers them in batches."""

    def __init__(
        self, config: SandboxConfig, rng: random.Random, faults: "FaultBook", clock: "Clock"
    ) -> None:
        self.config = config
        self.faults = faults
        self.clock = clock
        self.transport: httpx.AsyncBaseTransport | None = None
        self._rng = rng
        self._numbers = itertools.count(1)
        self._lock: asyncio.Lock | None = None
        self.reset()

    def reset(self) -> None:
        """Back to the configured webhooks and target, with an empty queue and history."""
        self.url = self.config.webhook_url
        self.webhooks: list[WebhookSpec] = list(self.config.webhooks)
        self.queue: list[QueueItem] = []
        self.deliveries: list[dict[str, Any]] = []

    def restore(self, webhook_id: str, data: dict[str, Any], attempts: int) -> None:
        """Queue an item kept from before a restart, if its webhook still exists: due after
        ``RESTORED_GRACE_S``, so that the receiver (started after the sandbox) is up; a refused
        connection would lose it for good."""
        if any(hook.id == webhook_id for hook in self.webhooks):
            due = time.monotonic() + RESTORED_GRACE_S
            item = QueueItem(next(self._numbers), webhook_id, dict(data), attempts, due)
            self.queue.append(item)

    def enqueue(self, event: str, data: dict[str, Any]) -> None:
        """Queue ``data`` for every webhook of ``event`` (a ``drop`` fault loses it here)."""
        for hook in self.webhooks:
            if hook.event != event:
                continue
            if self._fired(event, php_json(data), {"drop"}):
                self._record(hook, [data], 0, "dropped", 0)
                continue
            self.queue.append(QueueItem(next(self._numbers), hook.id, dict(data)))

    async def flush(
        self, *, only_due: bool = False, portion: int | None = None
    ) -> list[dict[str, Any]]:
        """Send what is queued (only items whose retry time has come if ``only_due``). With a
        ``portion``, as EspoCRM's job does: at most that many items, one batch per webhook."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            results: list[dict[str, Any]] = []
            if not self.url:
                return results
            now = time.monotonic()
            due = [item for item in self.queue if not only_due or item.process_at <= now]
            # Only a flush of two or more items can be reordered (and spends the fault).
            if len(due) > 1 and self.faults.fire("webhooks", "POST", "", "", {"reorder"}):
                due.reverse()
            if portion is not None:
                due = due[:portion]
            async with httpx.AsyncClient(timeout=TIMEOUT, transport=self.transport) as client:
                for hook in list(self.webhooks):
                    mine = [item for item in due if item.webhook_id == hook.id]
                    results.extend(
                        await self._flush_hook(client, hook, mine, once=portion is not None)
                    )
            return results

    async def run(self) -> None:
        """The queue job: every ``webhook_queue_interval_s``, a portion of the due items."""
        while True:
            await asyncio.sleep(self.config.webhook_queue_interval_s)
            await self.flush(only_due=True, portion=self.config.webhook_queue_portion)

    async def _flush_hook(
        self, client: httpx.AsyncClient, hook: WebhookSpec, items: list[QueueItem], *, once: bool
    ) -> list[dict[str, Any]]:
        results = []
        size = self.config.webhook_batch_size
        for start in range(0, len(items), size):
            if hook not in self.webhooks:
                break
            results.extend(await self._deliver(client, hook, items[start : start + size]))
            if once:
                break
        return results

    async def _deliver(
        self, client: httpx.AsyncClient, hook: WebhookSpec, batch: list[QueueItem]
    ) -> list[dict[str, Any]]:
        body = php_json([item.data for item in batch])
        fired = self._fired(hook.event, body, {"latency", "duplicate"})
        for fault in fired:
            if fault.spec.kind == "latency":
                await asyncio.sleep(fault.spec.latency_s)
        copies = 2 if any(f.spec.kind == "duplicate" for f in fired) else 1
        attempt = max(item.attempts for item in batch) + 1
        results = []
        for _ in range(copies):
            status = await self._post(client, hook, body)
            results.append(self._record(hook, [i.data for i in batch], status, "", attempt))
        verdict = results[0]["outcome"]
        for item in batch:
            item.attempts += 1
            item.process_at = time.monotonic() + self.config.webhook_retry_interval_s
            if not (verdict == "retry" and item.attempts < self.config.webhook_max_attempts):
                self.queue.remove(item)
        if verdict == "deleted":
            self.webhooks = [h for h in self.webhooks if h.id != hook.id]
            self.queue = [item for item in self.queue if item.webhook_id != hook.id]
        return results

    async def _post(self, client: httpx.AsyncClient, hook: WebhookSpec, body: bytes) -> int:
        assert self.url is not None
        current, legacy = signatures(hook.id, body, hook.secret.get_secret_value())
        headers = {"Content-Type": "application/json", "Signature": current, "X-Signature": legacy}
        try:
            async with asyncio.timeout(TOTAL_TIMEOUT_S):
                response = await client.post(self.url, content=body, headers=headers)
        except (httpx.TimeoutException, TimeoutError):
            return TIMED_OUT
        except httpx.HTTPError:
            return NO_CONNECTION
        return response.status_code

    def _fired(self, event: str, body: bytes, kinds: set[str]) -> list[Any]:
        return self.faults.fire("webhooks", "POST", event, body.decode("ascii"), kinds)

    def _record(
        self,
        hook: WebhookSpec,
        items: list[dict[str, Any]],
        status: int,
        outcome: str,
        attempt: int,
    ) -> dict[str, Any]:
        entry = {
            "webhook_id": hook.id,
            "event": hook.event,
            "attempt": attempt,
            "status": status,
            "outcome": outcome or outcome_of(status),
            "items": len(items),
            "ids": [item.get("id") for item in items],
            "at": self.clock.espo(),
        }
        self.deliveries.append(entry)
        return entry
