"""Mistral chat completions through the official ``mistralai`` 2.x SDK: two-line deal summaries and
a lead's classification (lead.v2).

The SDK shares our httpx stack (a client with our transport can be handed in) and retries 429 and
5xx itself with the ``RetryConfig`` below, honouring ``Retry-After``; a completion has no side
effect, so its POST may be retried. The answer comes back unchecked: ``domain.summaries`` decides
whether it is a usable summary, ``domain.classification`` whether it is a usable classification,
or a review item (with the raw text).
"""

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
from mistralai.client import Mistral, errors, models
from mistralai.client.utils import BackoffStrategy, RetryConfig
from pydantic import BaseModel, ConfigDict

from followup_pipeline.domain.classification import lead_v2_schema
from followup_pipeline.domain.emails import MailText
from followup_pipeline.integrations import prompts
from followup_pipeline.integrations.errors import (
    IntegrationError,
    PermanentError,
    TransientError,
)
from followup_pipeline.integrations.http import (
    DEFAULT_TIMEOUTS,
    MAX_RETRY_WAIT,
    RETRYABLE_STATUSES,
    Timeouts,
    tls_context,
)

VENDOR = "mistral"
#: What every summary request asks for besides its messages (part of the input hash).
MAX_TOKENS = 300
TEMPERATURE = 0.2
#: What every classification asks for besides its messages and schema (part of its input hash):
#: room for a 200-character summary and five 200-character reasons in JSON, and no sampling
#: spread (the same lead, the same class).
CLASSIFY_MAX_TOKENS = 800
CLASSIFY_TEMPERATURE = 0.0
#: A summary call may take a while on a busy model; this bounds each attempt.
TIMEOUT_MS = 60_000
#: Backoff in ms: 0.5 s doubling to 10 s, at most 60 s in all, with up to 0.5 s jitter.
RETRY = RetryConfig(
    "backoff",
    BackoffStrategy(
        initial_interval=500,
        max_interval=10_000,
        exponent=2.0,
        max_elapsed_time=60_000,
        jitter_ms=500,
    ),
    retry_connection_errors=True,
)


class TokenUsage(BaseModel):
    """Tokens the call cost."""

    model_config = ConfigDict(frozen=True)

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class ModelAnswer(BaseModel):
    """What the model answered, unchecked (``domain.summaries`` checks it), and what it cost."""

    model_config = ConfigDict(frozen=True)

    text: str
    finish_reason: str | None
    model: str
    usage: TokenUsage
    #: The completion's ``id``: what Mistral's support asks for about one answer.
    request_id: str | None = None


def summary_prompt(*, deal_name: str, mails: Sequence[MailText]) -> str:
    """The user message: the deal and its e-mails, oldest first, as prepared by the caller."""
    parts = [
        prompts.SUMMARY_EMAIL_TEMPLATE.format(
            number=number,
            date=m.sent_at.strftime("%Y-%m-%d %H:%M") if m.sent_at else "unsent",
            sender=m.sender,
            subject=m.subject,
            body=m.body,
        )
        for number, m in enumerate(mails, start=1)
    ]
    return prompts.SUMMARY_USER_TEMPLATE.format(deal_name=deal_name, emails="\n\n".join(parts))


def summary_messages(
    *, deal_name: str, mails: Sequence[MailText], max_chars: int = 160
) -> list[dict[str, str]]:
    """Exactly the messages a summary request sends (``max_chars``: the longest line allowed)."""
    return [
        {"role": "system", "content": prompts.SUMMARY_SYSTEM_PROMPT.format(max_chars=max_chars)},
        {"role": "user", "content": summary_prompt(deal_name=deal_name, mails=mails)},
    ]


def input_hash(model: str, messages: Sequence[dict[str, str]]) -> str:
    """The hash of everything a summary request sends: the same hash, the same answer to expect."""
    payload = {
        "model": model,
        "max_tokens": MAX_TOKENS,
        "temperature": TEMPERATURE,
        "schema_name": prompts.SUMMARY_SCHEMA_NAME,
        "schema": prompts.SUMMARY_SCHEMA,
        "messages": list(messages),
    }
    text = json.dumps(payload, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def classify_messages(text: str) -> list[dict[str, str]]:
    """Exactly the messages a classification sends: the system prompt and the lead's text, as
    ``domain.lead_text.classification_text`` made it (masked)."""
    return [
        {"role": "system", "content": prompts.CLASSIFY_SYSTEM_PROMPT},
        {"role": "user", "content": prompts.CLASSIFY_USER_TEMPLATE.format(lead=text)},
    ]


def classify_input_hash(model: str, text: str, schema: Mapping[str, Any] | None = None) -> str:
    """The hash of everything a classification sends: the same hash, the same answer to expect
    (a lead asked again with nothing new need not be sent again)."""
    payload = {
        "model": model,
        "max_tokens": CLASSIFY_MAX_TOKENS,
        "temperature": CLASSIFY_TEMPERATURE,
        "schema_name": prompts.CLASSIFY_SCHEMA_NAME,
        "schema": dict(schema) if schema is not None else lead_v2_schema(),
        "messages": classify_messages(text),
    }
    encoded = json.dumps(payload, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(encoded.encode()).hexdigest()


class MistralClient:
    """Two-line summaries and lead classifications from a Mistral chat model."""

    def __init__(
        self,
        api_key: str,
        model: str,
        server_url: str | None = None,
        transport: httpx.BaseTransport | None = None,
        retry_config: RetryConfig = RETRY,
        timeout_ms: int = TIMEOUT_MS,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
    ) -> None:
        self.model = model
        # The SDK sets one number (its timeout_ms, else 300 s) on every request for every phase,
        # connect included: a hook puts back a short connect and a completion-sized read.
        read_s = timeout_ms / 1000
        timeout = httpx.Timeout(read_s, connect=timeouts.connect_s, pool=timeouts.connect_s)

        def own_timeouts(request: httpx.Request) -> None:
            request.extensions["timeout"] = timeout.as_dict()

        self._http = httpx.Client(
            transport=transport,
            timeout=timeout,
            verify=tls_context(),
            follow_redirects=True,
            event_hooks={"request": [own_timeouts], "response": [bounded_retry_after]},
        )
        self._sdk = Mistral(
            api_key=api_key,
            server_url=server_url,
            retry_config=retry_config,
            client=self._http,
        )

    def close(self) -> None:
        """Close the HTTP client handed to the SDK (the SDK does not close what it was given)."""
        self._http.close()

    def available_models(self) -> list[str]:
        """The models this key may use (``GET /v1/models``): a check of the key and the model."""
        try:
            listing = self._sdk.models.list()
        except (errors.MistralError, errors.NoResponseError, httpx.TransportError) as exc:
            raise sdk_error(exc, "model list") from exc
        return [str(getattr(model, "id", "")) for model in listing.data or []]

    def summarise(self, *, messages: Sequence[dict[str, str]]) -> ModelAnswer:
        """Ask for a two-line summary (JSON schema, strict); the answer comes back unchecked."""
        return self._complete(
            messages,
            max_tokens=MAX_TOKENS,
            temperature=TEMPERATURE,
            schema_name=prompts.SUMMARY_SCHEMA_NAME,
            schema=prompts.SUMMARY_SCHEMA,
        )

    def classify_lead(self, text: str, schema: Mapping[str, Any] | None = None) -> ModelAnswer:
        """Ask for a lead's classification in ``schema`` (by default lead.v2 as the package ships
        it; JSON schema, strict) from ``text``, the lead as
        ``domain.lead_text.classification_text`` made it (masked); the answer comes back
        unchecked: ``domain.classification.parse_classification`` decides."""
        return self._complete(
            classify_messages(text),
            max_tokens=CLASSIFY_MAX_TOKENS,
            temperature=CLASSIFY_TEMPERATURE,
            schema_name=prompts.CLASSIFY_SCHEMA_NAME,
            schema=dict(schema) if schema is not None else lead_v2_schema(),
        )

    def _complete(
        self,
        messages: Sequence[dict[str, str]],
        *,
        max_tokens: int,
        temperature: float,
        schema_name: str,
        schema: dict[str, Any],
    ) -> ModelAnswer:
        """One chat completion whose answer must follow ``schema`` (strict), unchecked."""
        sdk_messages: list[models.ChatCompletionRequestMessage] = [
            models.SystemMessage(content=m["content"])
            if m["role"] == "system"
            else models.UserMessage(content=m["content"])
            for m in messages
        ]
        try:
            response = self._sdk.chat.complete(
                model=self.model,
                max_tokens=max_tokens,
                temperature=temperature,
                messages=sdk_messages,
                response_format=models.ResponseFormat(
                    type="json_schema",
                    json_schema=models.JSONSchema(
                        name=schema_name, schema_definition=schema, strict=True
                    ),
                ),
            )
        except (errors.MistralError, errors.NoResponseError, httpx.TransportError) as exc:
            raise sdk_error(exc) from exc
        usage = TokenUsage(
            prompt_tokens=response.usage.prompt_tokens or 0,
            completion_tokens=response.usage.completion_tokens or 0,
            total_tokens=response.usage.total_tokens or 0,
        )
        text, finish = answer_text(response)
        return ModelAnswer(
            text=text,
            finish_reason=finish,
            model=response.model,
            usage=usage,
            request_id=response.id or None,
        )


def bounded_retry_after(response: httpx.Response) -> None:
    """The SDK sleeps for whatever ``Retry-After`` says (a day, or ``inf``, which crashes it):
    a wait in plain seconds is capped at ``MAX_RETRY_WAIT``, anything else is dropped (the SDK
    then backs off on its own)."""
    for name, scale in (("retry-after", 1.0), ("retry-after-ms", 1000.0)):
        value = response.headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) / scale if value.isascii() else math.nan
        except ValueError:
            seconds = math.nan
        if math.isfinite(seconds) and seconds >= 0:
            response.headers[name] = f"{min(seconds, MAX_RETRY_WAIT) * scale:g}"
        else:
            del response.headers[name]


def answer_text(response: models.ChatCompletionResponse) -> tuple[str, str | None]:
    """The text of the first choice and its finish reason."""
    if not response.choices or response.choices[0].message is None:
        return "", None
    choice = response.choices[0]
    content = choice.message.content if choice.message else None
    if isinstance(content, list):
        content = "".join(getattr(chunk, "text", "") for chunk in content)
    return str(content or ""), str(choice.finish_reason)


def sdk_error(exc: Exception, what: str = "chat completion") -> IntegrationError:
    """Our error for what the SDK raised once its own retries were spent (``what``: the call)."""
    if isinstance(exc, errors.MistralError) and 200 <= exc.status_code < 300:
        # A 200 whose body is not a chat completion (truncated, HTML, another shape): the service
        # misspoke, the model did not. Transient: asked again later, never a review item.
        return TransientError(
            f"HTTP {exc.status_code} with a body that is not a {what}", vendor=VENDOR
        )
    if isinstance(exc, errors.MistralError):
        status = exc.status_code
        text = f"HTTP {status} on {what}: {exc.body[:300]}"
        if status in RETRYABLE_STATUSES:
            retry_after = exc.headers.get("Retry-After")
            digits = retry_after is not None and retry_after.isascii() and retry_after.isdigit()
            seconds = min(float(retry_after), MAX_RETRY_WAIT) if digits and retry_after else None
            return TransientError(text, vendor=VENDOR, status=status, retry_after=seconds)
        return PermanentError(text, vendor=VENDOR, status=status, vendor_message=exc.body[:300])
    return TransientError(f"{type(exc).__name__} on {what}", vendor=VENDOR)
