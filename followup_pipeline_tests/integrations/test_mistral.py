"""Mistral client: the real ``mistralai`` SDK against ``httpx.MockTransport``."""

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from mistralai.client.utils import BackoffStrategy, RetryConfig

from followup_pipeline.domain.emails import mail_text
from followup_pipeline.integrations import prompts
from followup_pipeline.integrations.errors import PermanentError, TransientError
from followup_pipeline.integrations.mistral import MistralClient, input_hash, summary_messages

Handler = Callable[[httpx.Request], httpx.Response]
QUICK_RETRY = RetryConfig("backoff", BackoffStrategy(1, 5, 1.5, 50, jitter_ms=0), True)
MAILS = [
    mail_text(
        sent_at=None,
        sender="Buyer",
        subject="Offer",
        body="<p>We need a &amp; discount</p>",
        is_html=True,
        max_chars=2000,
        mask=True,
    )
]


def messages(deal_name: str = "A") -> list[dict[str, str]]:
    return summary_messages(deal_name=deal_name, mails=MAILS)


def completion(content: str, finish_reason: str = "stop") -> httpx.Response:
    return httpx.Response(
        200,
        json={
            "id": "cmpl-1",
            "object": "chat.completion",
            "model": "mistral-small-latest",
            "created": 1764403200,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": finish_reason,
                }
            ],
            "usage": {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150},
        },
    )


GOOD = json.dumps({"line1": "ACME asks for a discount.", "line2": "Send a revised offer."})


def mistral(handler: Handler, **kwargs: Any) -> MistralClient:
    return MistralClient(
        "KEY-SECRET",
        "mistral-small-latest",
        server_url="http://mistral.test/mistral",
        transport=httpx.MockTransport(handler),
        **kwargs,
    )


def test_summarise_returns_parsed_summary_and_usage() -> None:
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return completion(GOOD)

    result = mistral(handler).summarise(messages=messages("ACME rollout"))
    assert result.text == GOOD  # unchecked: domain.summaries decides
    assert result.usage.total_tokens == 150
    request = sent[0]
    assert request.url.path == "/mistral/v1/chat/completions"
    assert request.headers["Authorization"] == "Bearer KEY-SECRET"
    body = json.loads(request.content)
    assert body["model"] == "mistral-small-latest"
    assert body["max_tokens"] == 300
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["strict"] is True
    assert body["response_format"]["json_schema"]["schema"] == prompts.SUMMARY_SCHEMA
    system = prompts.SUMMARY_SYSTEM_PROMPT.format(max_chars=160)
    assert body["messages"][0] == {"role": "system", "content": system}
    assert "We need a & discount" in body["messages"][1]["content"]
    assert "ACME rollout" in body["messages"][1]["content"]


def test_summarise_retries_an_injected_429() -> None:
    calls: list[httpx.Request] = []
    limited = httpx.Response(
        429,
        headers={"Retry-After": "0.01"},
        json={"object": "error", "message": "Rate limit exceeded", "type": "rate_limited"},
    )

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return limited if len(calls) == 1 else completion(GOOD)

    result = mistral(handler).summarise(messages=messages())
    assert result.text == GOOD
    assert len(calls) == 2


def test_summarise_persistent_429_is_transient() -> None:
    limited = httpx.Response(429, json={"message": "Rate limit exceeded"})
    with pytest.raises(TransientError) as caught:
        mistral(lambda _: limited, retry_config=QUICK_RETRY).summarise(messages=messages())
    assert caught.value.status == 429


def test_summarise_timeout_is_transient() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    with pytest.raises(TransientError):
        mistral(handler, retry_config=QUICK_RETRY).summarise(messages=messages())


@pytest.mark.parametrize(
    ("status", "body"),
    [(401, {"message": "Unauthorized"}), (422, {"detail": [{"msg": "bad", "loc": ["body"]}]})],
)
def test_summarise_refusals_are_permanent(status: int, body: Any) -> None:
    with pytest.raises(PermanentError) as caught:
        mistral(lambda _: httpx.Response(status, json=body)).summarise(messages=messages())
    assert caught.value.status == status
    assert "KEY-SECRET" not in str(caught.value)


def test_summarise_hash_covers_exactly_what_is_sent() -> None:
    one = input_hash("mistral-small-latest", messages("ACME"))
    assert one == input_hash("mistral-small-latest", messages("ACME"))
    assert one != input_hash("mistral-small-latest", messages("ACME GmbH"))
    assert one != input_hash("mistral-large-latest", messages("ACME"))


@pytest.mark.parametrize(
    "body", [b'{"id": "x", "choi', b'{"object": "chat.completion"}', b"<html>gateway</html>"]
)
def test_summarise_malformed_200_is_transient_not_a_review_item(body: bytes) -> None:
    headers = {"content-type": "application/json"}
    client = mistral(lambda _: httpx.Response(200, content=body, headers=headers))
    with pytest.raises(TransientError):
        client.summarise(messages=messages())


def test_summarise_keeps_a_short_connect_timeout() -> None:
    seen: list[dict[str, float]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.extensions["timeout"])
        return completion(GOOD)

    mistral(handler).summarise(messages=messages())
    assert seen[0]["connect"] == 5.0
    assert seen[0]["read"] == 60.0
