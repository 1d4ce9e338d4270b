"""The Mistral double: auth, validation, response shape, usage, JSON modes and the summariser."""

import json
from typing import Any

import pytest

from followup_pipeline_tests.sandbox.conftest import MISTRAL, Sandbox

pytestmark = pytest.mark.anyio
URL = "/mistral/v1/chat/completions"
PROMPT = (
    "Summarise these e-mails in two lines:\n\n"
    "From: anna@kunde.example\nSubject: Angebot\nHallo Herr Vogel,\n"
    "Wir prüfen das Angebot bis Freitag. Danach melden wir uns.\n\n"
    "From: sales@example.com\nSubject: Re: Angebot\nHello Anna,\n"
    "Thanks for the update. We can hold the price until March."
)


def chat(**extra: Any) -> dict[str, Any]:
    """A chat-completion body with the e-mail prompt."""
    return {
        "model": "mistral-small-latest",
        "messages": [
            {"role": "system", "content": "You summarise."},
            {"role": "user", "content": PROMPT},
        ],
        "temperature": 0.2,
        **extra,
    }


async def test_mistral_completion_has_vendor_shape_and_usage(sandbox: Sandbox) -> None:
    response = await sandbox.client.post(URL, json=chat(), headers=MISTRAL)
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["model"] == "mistral-small-latest"
    assert isinstance(body["created"], int)
    choice = body["choices"][0]
    assert (choice["index"], choice["message"]["role"], choice["finish_reason"]) == (
        0,
        "assistant",
        "stop",
    )
    assert choice["message"]["content"].splitlines() == [
        "Wir prüfen das Angebot bis Freitag.",
        "Thanks for the update.",
    ]
    usage = body["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0


async def test_mistral_json_modes_answer_json_with_schema_names(sandbox: Sandbox) -> None:
    plain = await sandbox.client.post(
        URL, json=chat(response_format={"type": "json_object"}), headers=MISTRAL
    )
    assert set(json.loads(plain.json()["choices"][0]["message"]["content"])) == {"line1", "line2"}
    schema = {
        "type": "object",
        "properties": {"headline": {"type": "string"}, "detail": {"type": "string"}},
        "required": ["headline", "detail"],
    }
    fmt = {
        "type": "json_schema",
        "json_schema": {"name": "summary", "schema": schema, "strict": True},
    }
    answer = await sandbox.client.post(URL, json=chat(response_format=fmt), headers=MISTRAL)
    content = json.loads(answer.json()["choices"][0]["message"]["content"])
    assert content == {
        "headline": "Wir prüfen das Angebot bis Freitag.",
        "detail": "Thanks for the update.",
    }


async def test_mistral_is_deterministic(sandbox: Sandbox) -> None:
    first = await sandbox.client.post(URL, json=chat(), headers=MISTRAL)
    second = await sandbox.client.post(URL, json=chat(), headers=MISTRAL)
    assert first.json()["choices"] == second.json()["choices"]


async def test_mistral_max_tokens_cuts_with_finish_reason_length(sandbox: Sandbox) -> None:
    response = await sandbox.client.post(URL, json=chat(max_tokens=2), headers=MISTRAL)
    body = response.json()
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 2


async def test_mistral_refuses_wrong_key_with_401(sandbox: Sandbox) -> None:
    response = await sandbox.client.post(URL, json=chat(), headers={"Authorization": "Bearer no"})
    assert response.status_code == 401
    assert response.json()["message"] == "Unauthorized"
    assert "request_id" in response.json()


@pytest.mark.parametrize(
    "body",
    [
        {"model": "m"},
        chat(temperature=7),
        chat(response_format={"type": "yaml"}),
        {"model": "m", "messages": [{"role": "robot", "content": "x"}]},
    ],
)
async def test_mistral_refuses_invalid_bodies_with_422(
    sandbox: Sandbox, body: dict[str, Any]
) -> None:
    response = await sandbox.client.post(URL, json=body, headers=MISTRAL)
    assert response.status_code == 422
    assert response.json()["message"]["detail"][0]["loc"][0] == "body"


async def test_mistral_rate_limit_burst_answers_429_then_recovers(sandbox: Sandbox) -> None:
    await sandbox.fault(vendor="mistral", kind="rate_limit", count=2)
    statuses = [(await sandbox.client.post(URL, json=chat(), headers=MISTRAL)) for _ in range(3)]
    assert [r.status_code for r in statuses] == [429, 429, 200]
    assert statuses[0].json() == {
        "object": "error",
        "message": "Rate limit exceeded",
        "type": "rate_limited",
        "param": None,
        "code": "1300",
    }


async def test_mistral_invalid_output_fault_returns_the_given_content(sandbox: Sandbox) -> None:
    await sandbox.fault(vendor="mistral", kind="invalid_output", count=1)
    fmt = {"type": "json_object"}
    default = await sandbox.client.post(URL, json=chat(response_format=fmt), headers=MISTRAL)
    with pytest.raises(json.JSONDecodeError):
        json.loads(default.json()["choices"][0]["message"]["content"])
    await sandbox.fault(vendor="mistral", kind="invalid_output", content='{"line1": 1}', count=1)
    given = await sandbox.client.post(URL, json=chat(response_format=fmt), headers=MISTRAL)
    assert given.json()["choices"][0]["message"]["content"] == '{"line1": 1}'
