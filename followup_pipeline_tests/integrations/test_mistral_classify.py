"""A lead's classification through the real ``mistralai`` SDK: the request it sends
(``httpx.MockTransport``), and the sandbox's model over real HTTP, its answers checked."""

import json
from typing import Any

import httpx
import jsonschema
import pytest

from followup_pipeline.domain.classification import (
    ClassificationRejected,
    lead_v2_schema,
    parse_classification,
)
from followup_pipeline.domain.lead_text import classification_text
from followup_pipeline.domain.leads import LeadIn
from followup_pipeline.integrations import prompts
from followup_pipeline.integrations.mistral import (
    CLASSIFY_MAX_TOKENS,
    MistralClient,
    classify_input_hash,
)
from followup_pipeline.sandbox.config import SandboxConfig

KEY = SandboxConfig().mistral_api_key.get_secret_value()
GERMAN = LeadIn(
    email="julia.hoffmann@baeckerei.example",
    name="Julia Hoffmann",
    company="Bäckerei Hoffmann GmbH",
    message=(
        "Guten Tag,\nwir möchten ein Angebot für 25 Lizenzen. Bitte rufen Sie mich an: "
        "+49 89 1234567.\nViele Grüße\nJulia Hoffmann"
    ),
    page="/preise",
    source="site-form",
    kind="form",
)
ENGLISH = LeadIn(
    email="sam@example.org",
    message="Hello, does the tool work with Outlook on a Mac? Mail me at sam@example.org.",
    source="site-form",
    kind="form",
)
COMPANY = {"name": "Bäckerei Hoffmann GmbH", "industry": "Food", "size": "120", "country": "DE"}
ANSWER = {
    "segment": "mid_market",
    "intent": "buy",
    "priority": 2,
    "summary": "Möchte ein Angebot für 25 Lizenzen.",
    "language": "de",
    "reasons": ["Fragt nach einem Angebot."],
}


def completion(content: str) -> httpx.Response:
    return httpx.Response(
        200,
        json={
            "id": "cmpl-7f3a",
            "object": "chat.completion",
            "model": "mistral-small-latest",
            "created": 1764403200,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 300, "completion_tokens": 60, "total_tokens": 360},
        },
    )


def test_mistral_classify_sends_lead_v2_as_a_strict_json_schema() -> None:
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return completion(json.dumps(ANSWER))

    text = classification_text(GERMAN, COMPANY)
    client = MistralClient(
        "KEY-SECRET",
        "mistral-small-latest",
        server_url="http://mistral.test/mistral",
        transport=httpx.MockTransport(handler),
    )
    try:
        answer = client.classify_lead(text, lead_v2_schema())
    finally:
        client.close()
    body = json.loads(sent[0].content)
    assert sent[0].url.path == "/mistral/v1/chat/completions"
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "lead_v2", "schema": lead_v2_schema(), "strict": True},
    }
    assert body["max_tokens"] == CLASSIFY_MAX_TOKENS
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert body["messages"][0]["content"] == prompts.CLASSIFY_SYSTEM_PROMPT
    user = body["messages"][1]["content"]
    assert text in user
    for personal in ("julia.hoffmann@baeckerei.example", "1234567", "Julia Hoffmann"):
        assert personal not in json.dumps(body, ensure_ascii=False)
    # Unchecked, with what the budget and support need.
    assert answer.text == json.dumps(ANSWER)
    assert answer.usage.total_tokens == 360
    assert answer.request_id == "cmpl-7f3a"
    assert answer.model == "mistral-small-latest"
    assert parse_classification(answer.text, facts=text).intent == "buy"


def test_mistral_classify_defaults_to_lead_v2_and_hashes_what_it_sends() -> None:
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return completion(json.dumps(ANSWER))

    client = MistralClient(
        "KEY-SECRET",
        "mistral-small-latest",
        server_url="http://mistral.test/mistral",
        transport=httpx.MockTransport(handler),
    )
    try:
        client.classify_lead("Message:\nHallo")
    finally:
        client.close()
    assert bodies[0]["response_format"]["json_schema"]["schema"] == lead_v2_schema()
    first = classify_input_hash("mistral-small-latest", "Message:\nHallo")
    assert first == classify_input_hash("mistral-small-latest", "Message:\nHallo", lead_v2_schema())
    assert first != classify_input_hash("mistral-small-latest", "Message:\nHallo!")
    assert first != classify_input_hash("mistral-large-latest", "Message:\nHallo")


def sandbox_client(sandbox: str) -> MistralClient:
    return MistralClient(KEY, "mistral-small-latest", server_url=f"{sandbox}/mistral")


@pytest.mark.parametrize(
    ("lead", "company", "expected"),
    [
        (GERMAN, COMPANY, {"intent": "buy", "language": "de", "segment": "mid_market"}),
        (ENGLISH, None, {"intent": "question", "language": "en", "segment": "unknown"}),
    ],
    ids=["german-offer", "english-question"],
)
def test_mistral_classify_sandbox_answers_a_valid_lead_v2(
    sandbox: str, lead: LeadIn, company: dict[str, str] | None, expected: dict[str, str]
) -> None:
    text = classification_text(lead, company)
    client = sandbox_client(sandbox)
    try:
        answer = client.classify_lead(text, lead_v2_schema())
        again = client.classify_lead(text, lead_v2_schema())
    finally:
        client.close()
    jsonschema.validate(json.loads(answer.text), lead_v2_schema())
    checked = parse_classification(answer.text, facts=text)
    assert {key: getattr(checked, key) for key in expected} == expected
    assert 1 <= checked.priority <= 4
    assert answer.text == again.text  # deterministic from the input
    assert answer.usage.total_tokens > 0
    assert answer.request_id


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "not JSON"),  # the fault's default: prose instead of JSON
        ('{"segment": "enterprise", "priority": 9}', "breaks lead.v2: "),
    ],
    ids=["nonsense", "schema-breaking"],
)
def test_mistral_classify_sandbox_invalid_output_is_rejected(
    sandbox: str, content: str | None, reason: str
) -> None:
    fault = {"vendor": "mistral", "kind": "invalid_output", "count": 1, "content": content}
    with httpx.Client(base_url=f"{sandbox}/_sandbox", timeout=5) as control:
        control.post("/faults", json=fault).raise_for_status()
    text = classification_text(ENGLISH)
    client = sandbox_client(sandbox)
    try:
        answer = client.classify_lead(text, lead_v2_schema())
    finally:
        client.close()
    with pytest.raises(ClassificationRejected) as caught:
        parse_classification(answer.text, facts=text)
    assert caught.value.reason.startswith(reason)
    assert caught.value.raw == answer.text
