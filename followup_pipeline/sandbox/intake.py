"""What the site form and the payment provider send (docs/vendors.md), their control API, and
the demo's leads.

A form submission is a Standard Webhooks message ``{"type": "form.submitted", "timestamp",
"data": {name, email, company, phone, message, consent, page}}`` with a ``msg_…`` id; a payment is
a Stripe event ``{"id": "evt_…", "object": "event", "api_version", "created", "data": {"object"},
"livemode": false, "pending_webhooks", "request", "type"}``, pretty-printed as Stripe sends it.
``senders.py`` signs, sends and retries them.
"""

import json
import random
import string
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from followup_pipeline.sandbox.senders import PAYMENT, SITE_FORM, Message
from followup_pipeline.sandbox.state import SandboxState

#: A Stripe API version (the account's, stamped on every event).
API_VERSION = "2024-06-20"
#: ``data.object``'s ``status`` for the PaymentIntent events the sandbox builds itself.
INTENT_STATUS = {
    "payment_intent.created": "requires_payment_method",
    "payment_intent.processing": "processing",
    "payment_intent.succeeded": "succeeded",
    "payment_intent.payment_failed": "requires_payment_method",
    "payment_intent.canceled": "canceled",
}
_BASE62 = string.digits + string.ascii_letters


class FormSubmission(BaseModel):
    """What a visitor typed into the site's contact form."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    email: str = Field(pattern=r"^[^@\s]+@[^@\s]+$")
    company: str | None = None
    phone: str | None = None
    message: str | None = None
    consent: bool = True
    page: str | None = None


class PaymentRequest(BaseModel):
    """A payment event to send: a Checkout Session or a PaymentIntent built from these fields,
    or ``object`` given whole (any other event type)."""

    model_config = ConfigDict(extra="forbid")

    type: str = Field(default="checkout.session.completed", min_length=1)
    email: str | None = None
    name: str | None = None
    phone: str | None = None
    #: In the currency's smallest unit (cents), as Stripe counts.
    amount_total: int = Field(default=49_000, ge=0)
    currency: str = Field(default="eur", pattern=r"^[a-z]{3}$")
    metadata: dict[str, str] = Field(default_factory=dict)
    object: dict[str, Any] | None = None


def _token(rng: random.Random, length: int) -> str:
    return "".join(rng.choice(_BASE62) for _ in range(length))


def submit_form(state: SandboxState, form: FormSubmission) -> Message:
    """Queue a form submission as the site's Standard Webhooks sender would send it."""
    now = state.clock.now()
    payload = {
        "type": "form.submitted",
        "timestamp": now.isoformat().replace("+00:00", "Z"),
        "data": form.model_dump(),
    }
    body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return state.senders.send(SITE_FORM, f"msg_{_token(state.rng, 27)}", body)


def _object(state: SandboxState, request: PaymentRequest, created: int) -> dict[str, Any]:
    if request.object is not None:
        return request.object
    intent = f"pi_{_token(state.rng, 24)}"
    if request.type.startswith("checkout.session."):
        return {
            "id": f"cs_test_{_token(state.rng, 58)}",
            "object": "checkout.session",
            "amount_subtotal": request.amount_total,
            "amount_total": request.amount_total,
            "created": created,
            "currency": request.currency,
            "customer_details": {
                "email": request.email,
                "name": request.name,
                "phone": request.phone,
            },
            "livemode": False,
            "metadata": request.metadata,
            "mode": "payment",
            "payment_intent": intent,
            "payment_status": "paid",
            "status": "complete",
        }
    if request.type in INTENT_STATUS:
        status = INTENT_STATUS[request.type]
        return {
            "id": intent,
            "object": "payment_intent",
            "amount": request.amount_total,
            "amount_received": request.amount_total if status == "succeeded" else 0,
            "created": created,
            "currency": request.currency,
            "livemode": False,
            "metadata": request.metadata,
            "receipt_email": request.email,
            "status": status,
        }
    raise ValueError(f"give the event's data.object as 'object' for {request.type!r}")


def record_payment(state: SandboxState, request: PaymentRequest) -> Message:
    """Queue a Stripe event as Stripe would send it to the payment endpoint."""
    created = int(state.clock.now().timestamp())
    event = {
        "id": f"evt_{_token(state.rng, 24)}",
        "object": "event",
        "api_version": API_VERSION,
        "created": created,
        "data": {"object": _object(state, request, created)},
        "livemode": False,
        "pending_webhooks": 1,
        "request": {"id": None, "idempotency_key": None},
        "type": request.type,
    }
    body = json.dumps(event, ensure_ascii=False, indent=2).encode("utf-8")
    return state.senders.send(PAYMENT, str(event["id"]), body)


Handler = Callable[[Request], Awaitable[Response]]


def intake_routes(state: SandboxState) -> list[Route]:
    """``/forms`` and ``/payments`` of the control API: send one (its first attempt made before
    the answer), list them with their deliveries, redeliver one by id; ``/senders/flush`` sends
    what is due by the sandbox's clock now (the senders' job does it every ``sender_tick_s``)."""

    def listing(source: str) -> Handler:
        async def handler(request: Request) -> Response:
            messages = [m.describe() for m in state.senders.messages.values() if m.source == source]
            history = [d for d in state.senders.deliveries if d["source"] == source]
            return JSONResponse({"messages": messages, "deliveries": history})

        return handler

    async def answer(message: Message) -> Response:
        deliveries = await state.senders.flush(only=message.id)
        return JSONResponse({**message.describe(), "deliveries": deliveries}, 201)

    async def form(request: Request) -> Response:
        raw = await request.body()
        return await answer(submit_form(state, FormSubmission.model_validate_json(raw)))

    async def payment(request: Request) -> Response:
        raw = await request.body()
        parsed = PaymentRequest.model_validate_json(raw or b"{}")
        return await answer(record_payment(state, parsed))

    def redeliver(source: str) -> Handler:
        async def handler(request: Request) -> Response:
            message = state.senders.redeliver(request.path_params["id"], source)
            if message is None:
                return JSONResponse({"error": f"no {source} message of that id"}, 404)
            deliveries = await state.senders.flush(only=message.id)
            return JSONResponse({**message.describe(), "deliveries": deliveries})

        return handler

    async def flush(request: Request) -> Response:
        return JSONResponse({"deliveries": await state.senders.flush()})

    return [
        Route("/senders/flush", flush, methods=["POST"]),
        Route("/forms", form, methods=["POST"]),
        Route("/forms", listing(SITE_FORM), methods=["GET"]),
        Route("/forms/{id}/redeliver", redeliver(SITE_FORM), methods=["POST"]),
        Route("/payments", payment, methods=["POST"]),
        Route("/payments", listing(PAYMENT), methods=["GET"]),
        Route("/payments/{id}/redeliver", redeliver(PAYMENT), methods=["POST"]),
    ]


#: The demo's visitors: a few, so that the same e-mail comes back (a form, then a payment).
VISITORS = [
    ("Katrin Brandt", "k.brandt@brandt-moebel.example", "Brandt Möbel GmbH", "+49 30 1234567"),
    ("Oliver Hughes", "oliver@hughes-design.example", "Hughes Design Ltd", None),
    ("Mira Jansen", "mira.jansen@nordwerk.example", "Nordwerk AG", "+49 40 7654321"),
    ("Samuel Okafor", "sam@okafor-consulting.example", None, "+44 20 7946 0000"),
    ("Lena Vogt", "lena.vogt@gmx.example", None, None),
    ("Priya Raman", "priya@lumen-labs.example", "Lumen Labs", None),
]
_MESSAGES = [
    "Wir interessieren uns für ein Angebot. Bitte rufen Sie uns an.",
    "Could you send me your price list?",
    "Gibt es eine Demo? Wir sind 40 Mitarbeitende.",
    None,
]
_PAGES = ["/kontakt", "/preise", "/en/contact", "/demo"]


def intake_step(state: SandboxState, rng: random.Random) -> str:
    """One arrival for the demo: a form, a payment (often by someone who filled in the form),
    now and then one of them sent again (a redelivery); a line that says which."""
    roll = rng.random()
    sent = list(state.senders.messages.values())[-10:]
    if sent and roll < 0.2:
        again = rng.choice(sent)
        state.senders.redeliver(again.id)
        return f"{again.source} {again.id} sent again (a redelivery)"
    name, email, company, phone = rng.choice(VISITORS)
    if roll < 0.6:
        form = FormSubmission(
            name=name,
            email=email,
            company=company,
            phone=phone,
            message=rng.choice(_MESSAGES),
            consent=rng.random() < 0.9,
            page=rng.choice(_PAGES),
        )
        message = submit_form(state, form)
        return f"site form from {email} ({message.id})"
    kind = "checkout.session.completed" if roll < 0.9 else "payment_intent.created"
    amount = rng.randrange(5, 60) * 1000
    request = PaymentRequest(type=kind, email=email, name=name, phone=phone, amount_total=amount)
    message = record_payment(state, request)
    return f"payment {kind} by {email} ({message.id})"
