"""The ASGI wrapper in front of each vendor: counts answers, applies rate limits and faults."""

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from followup_pipeline.sandbox.errors import vendor_error
from followup_pipeline.sandbox.faults import DroppedAnswer, FaultSpec
from followup_pipeline.sandbox.state import SandboxState

#: scope key under which the gate passes an ``invalid_output`` fault to the Mistral handler.
INVALID_OUTPUT_KEY = "sandbox.invalid_output"
DEFAULT_INVALID_OUTPUT = "Sure! Here is a short summary of the deal: the customer is interested."


@dataclass
class RateDecision:
    """A rate limiter's verdict: allowed or not, and the headers every answer carries."""

    allowed: bool
    headers: list[tuple[bytes, bytes]]


Limiter = Callable[[Scope], RateDecision]


class VendorGate:
    """Wraps one vendor's app: stats, an optional rate limiter, then the injected faults."""

    def __init__(
        self, app: ASGIApp, vendor: str, state: SandboxState, limiter: Limiter | None = None
    ) -> None:
        self.app = app
        self.vendor = vendor
        self.state = state
        self.limiter = limiter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body = await _read_body(receive)
        replay = _replayer(body)
        self.state.count_write(self.vendor, scope["method"], scope.get("path", ""))
        extra: list[tuple[bytes, bytes]] = []

        async def counted(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.state.count(self.vendor, message["status"])
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        if self.limiter is not None:
            decision = self.limiter(scope)
            extra = decision.headers
            if not decision.allowed:
                await vendor_error(self.vendor, 429)(scope, replay, counted)
                return
        path = scope.get("path", "")
        text = scope.get("query_string", b"").decode("latin-1") + body.decode("utf-8", "replace")
        fired = self.state.faults.fire(self.vendor, scope["method"], path, text)
        late = [f.spec.latency_s for f in fired if f.spec.kind == "latency" and f.spec.applied]
        for fault in fired:
            if fault.spec.kind == "latency" and not fault.spec.applied:
                await asyncio.sleep(fault.spec.latency_s)
        for fault in fired:
            spec = fault.spec
            if spec.kind in ("error", "outage", "rate_limit"):
                response = vendor_error(
                    self.vendor,
                    spec.answer_status(),
                    spec.retry_after,
                    legacy_mistral=self.state.config.mistral_legacy_errors,
                )
                await response(scope, replay, counted)
                return
        kinds: dict[str, FaultSpec] = {}
        for fault in fired:
            kinds.setdefault(fault.spec.kind, fault.spec)
        if "invalid_output" in kinds:
            scope = {**scope, INVALID_OUTPUT_KEY: kinds["invalid_output"].content}
            scope[INVALID_OUTPUT_KEY] = scope[INVALID_OUTPUT_KEY] or DEFAULT_INVALID_OUTPUT
        if "apply_then_error" in kinds:
            spec = kinds["apply_then_error"]

            async def swallow(message: Message) -> None:
                return None

            await self.app(scope, replay, swallow)  # the work is done...
            response = vendor_error(
                self.vendor,
                spec.answer_status(),
                spec.retry_after,
                legacy_mistral=self.state.config.mistral_legacy_errors,
            )
            await response(scope, replay, counted)  # ...and the answer says it failed
            return
        if "drop_answer" in kinds or "malformed" in kinds:
            messages: list[Message] = []

            async def capture(message: Message) -> None:
                messages.append(message)

            await self.app(scope, replay, capture)
            if "drop_answer" in kinds:
                self.state.count(self.vendor, 0)
                # Headers promising a body go out, the body never does: the server must close the
                # connection, and the client sees an incomplete answer (a transport error).
                start = messages[0]
                headers = [(k, v) for k, v in start["headers"] if k.lower() != b"content-length"]
                await send({**start, "headers": [*headers, (b"content-length", b"1024")]})
                raise DroppedAnswer()
            await _send_truncated(messages, counted)
            return
        if late:  # the work is done at once; its answer waits
            answer: list[Message] = []

            async def hold(message: Message) -> None:
                answer.append(message)

            await self.app(scope, replay, hold)
            await asyncio.sleep(max(late))
            for message in answer:
                await counted(message)
            return
        await self.app(scope, replay, counted)


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replayer(body: bytes) -> Receive:
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # like a real client: no disconnect until the answer
        return {"type": "http.disconnect"}

    return receive


async def _send_truncated(messages: list[Message], send: Send) -> None:
    start = messages[0]
    body = b"".join(m.get("body", b"") for m in messages[1:])
    broken = body[: len(body) // 2] if len(body) > 1 else b'{"'
    headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
    headers.append((b"content-length", str(len(broken)).encode()))
    await send({**start, "headers": headers})
    await send({"type": "http.response.body", "body": broken, "more_body": False})
