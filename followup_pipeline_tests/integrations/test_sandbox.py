"""Each client against the sandbox over real HTTP: main calls end to end, injected faults."""

from typing import Any

import httpx
import pytest

from followup_pipeline.domain.emails import MailText
from followup_pipeline.domain.summaries import SummaryContext, SummaryRejected, check_summary
from followup_pipeline.integrations.clickup import ClickUpClient
from followup_pipeline.integrations.errors import (
    NotFoundError,
    PermanentError,
    TransientError,
)
from followup_pipeline.integrations.espocrm import EspoCrmClient
from followup_pipeline.integrations.mistral import MistralClient, summary_messages
from followup_pipeline.integrations.outlook import OutlookClient
from followup_pipeline.sandbox.config import SandboxConfig

DEFAULTS = SandboxConfig()
KEY_FIELD = DEFAULTS.clickup_custom_fields[0].id


def control(sandbox: str, method: str, path: str, body: Any = None) -> Any:
    with httpx.Client(base_url=f"{sandbox}/_sandbox", timeout=5) as client:
        response = client.request(method, path, json=body)
        response.raise_for_status()
        return response.json()


def espo(sandbox: str, sleeps: list[float], hmac_secret: str | None = None) -> EspoCrmClient:
    key = DEFAULTS.espocrm_api_key.get_secret_value()
    return EspoCrmClient(f"{sandbox}/espocrm", key, hmac_secret, sleep=sleeps.append)


def clickup(sandbox: str, sleeps: list[float], key_field_id: str | None = None) -> ClickUpClient:
    token = DEFAULTS.clickup_token.get_secret_value()
    return ClickUpClient(
        f"{sandbox}/clickup/api",
        token,
        DEFAULTS.clickup_list_id,
        key_field_id,
        sleep=sleeps.append,
    )


def mistral(sandbox: str) -> MistralClient:
    key = DEFAULTS.mistral_api_key.get_secret_value()
    return MistralClient(key, "mistral-small-latest", server_url=f"{sandbox}/mistral")


def seed_deals(sandbox: str, count: int, stage: str = "Proposal") -> list[dict[str, Any]]:
    deals = [{"name": f"{stage} {n}", "stage": stage, "amount": 100 + n} for n in range(count)]
    created = control(sandbox, "POST", "/deals", {"deals": deals, "emit_webhooks": False})
    return list(created["deals"])


def test_espocrm_lists_gets_and_reads_activity(sandbox: str, sleeps: list[float]) -> None:
    proposals = seed_deals(sandbox, 450)
    seed_deals(sandbox, 3, "Negotiation")
    seed_deals(sandbox, 5, "Prospecting")
    deal_id = proposals[0]["id"]
    control(sandbox, "POST", f"/deals/{deal_id}/emails", {"subject": "Offer", "body": "Hi."})
    control(sandbox, "POST", f"/deals/{deal_id}/calls", {"name": "Intro call"})
    control(sandbox, "POST", f"/deals/{deal_id}/meetings", {"name": "Demo"})
    client = espo(sandbox, sleeps)
    try:
        listing = client.list_deals(stages=["Proposal", "Negotiation"])
        assert len(listing.records) == 453
        assert listing.invalid == []
        assert len({d.id for d in listing.records}) == 453
        assert client.get_deal(deal_id=deal_id).name == "Proposal 0"
        assert [e.subject for e in client.list_emails(deal_id=deal_id).records] == ["Offer"]
        assert [c.name for c in client.list_calls(deal_id=deal_id).records] == ["Intro call"]
        assert [m.name for m in client.list_meetings(deal_id=deal_id).records] == ["Demo"]
        assert client.stage_options() == DEFAULTS.espocrm_stages
        with pytest.raises(NotFoundError):
            client.get_deal(deal_id="does-not-exist")
    finally:
        client.close()


def test_espocrm_lists_deals_by_ids_in_listings_of_fifty(sandbox: str, sleeps: list[float]) -> None:
    deals = seed_deals(sandbox, 120)
    ids = [*[d["id"] for d in deals][:110], "00000000000000gone"]
    control(sandbox, "DELETE", f"/deals/{ids[3]}")
    before = control(sandbox, "GET", "/stats")["requests"].get("espocrm", {})
    client = espo(sandbox, sleeps)
    try:
        listing = client.list_deals_by_ids(ids=ids + ids[:5])  # repeats are asked once
    finally:
        client.close()
    after = control(sandbox, "GET", "/stats")["requests"]["espocrm"]
    assert sum(after.values()) - sum(before.values()) == 3  # 111 ids: 50 + 50 + 11
    assert {d.id for d in listing.records} == set(ids) - {ids[3], "00000000000000gone"}


def test_espocrm_hmac_auth_is_accepted(sandbox: str, sleeps: list[float]) -> None:
    (deal,) = seed_deals(sandbox, 1)
    client = espo(sandbox, sleeps, DEFAULTS.espocrm_hmac_secret.get_secret_value())
    try:
        assert client.get_deal(deal_id=deal["id"]).id == deal["id"]
    finally:
        client.close()


def test_espocrm_retries_an_injected_503(sandbox: str, sleeps: list[float]) -> None:
    seed_deals(sandbox, 2)
    control(
        sandbox,
        "POST",
        "/faults",
        {"vendor": "espocrm", "kind": "error", "status": 503, "count": 1},
    )
    client = espo(sandbox, sleeps)
    try:
        assert len(client.list_deals(stages=["Proposal"]).records) == 2
    finally:
        client.close()
    assert len(sleeps) == 1


@pytest.mark.parametrize("key_field_id", [None, KEY_FIELD], ids=["tag", "custom-field"])
def test_clickup_creates_finds_and_closes(
    sandbox: str, sleeps: list[float], key_field_id: str | None
) -> None:
    client = clickup(sandbox, sleeps, key_field_id)
    try:
        created = client.create_task(
            name="Follow up ACME",
            markdown="**Call** them",
            due_date=None,
            assignees=[],
            idempotency_key="task:1:1",
        )
        client.create_task(
            name="Other", markdown="x", due_date=None, assignees=[], idempotency_key="task:2:1"
        )
        found = client.find_tasks_by_key(idempotency_key="task:1:1")
        assert [t.id for t in found] == [created.id]
        closed = client.close_task(task_id=created.id, comment="Deal won")
        assert closed.status == "complete"  # the list's closed-type status, read from ClickUp
        assert client.get_task(task_id=created.id).status_type == "closed"
        assert [t.id for t in client.find_tasks_by_key(idempotency_key="task:1:1")] == [created.id]
    finally:
        client.close()


def test_clickup_dropped_create_is_ambiguous_and_found_by_key(
    sandbox: str, sleeps: list[float]
) -> None:
    fault = {"vendor": "clickup", "kind": "drop_answer", "method": "POST", "count": 1}
    control(sandbox, "POST", "/faults", fault)
    client = clickup(sandbox, sleeps)
    try:
        with pytest.raises(TransientError) as caught:
            client.create_task(
                name="n", markdown="m", due_date=None, assignees=[], idempotency_key="task:9:1"
            )
        assert caught.value.ambiguous is True
        assert len(client.find_tasks_by_key(idempotency_key="task:9:1")) == 1
    finally:
        client.close()


def test_clickup_retries_an_injected_429(sandbox: str, sleeps: list[float]) -> None:
    client = clickup(sandbox, sleeps)
    try:
        task = client.create_task(
            name="n", markdown="m", due_date=None, assignees=[], idempotency_key="task:3:1"
        )
        control(sandbox, "POST", "/faults", {"vendor": "clickup", "kind": "rate_limit", "count": 1})
        assert client.get_task(task_id=task.id).id == task.id
    finally:
        client.close()
    (wait,) = sleeps  # until X-RateLimit-Reset: the end of ClickUp's minute window
    assert 0 <= wait <= 62


def test_outlook_sends_mail(sandbox: str, sleeps: list[float]) -> None:
    client = OutlookClient(
        f"{sandbox}/login",
        f"{sandbox}/graph",
        DEFAULTS.graph_tenant_id,
        DEFAULTS.graph_client_id,
        DEFAULTS.graph_client_secret.get_secret_value(),
        "followup@example.com",
        sleep=sleeps.append,
    )
    try:
        client.send_mail(
            to=["team@example.com"],
            subject="Morning list",
            html="<p>3 follow-ups</p>",
            headers={"X-Followup-Key": "report:morning:2026-11-30"},
        )
        client.send_mail(to=["team@example.com"], subject="Second", html="<p>x</p>")
    finally:
        client.close()
    outbox = control(sandbox, "GET", "/outbox")["messages"]
    assert len(outbox) == 2
    assert "Morning list" in str(outbox[0])


def test_outlook_sender_the_tenant_lacks_is_not_found(sandbox: str, sleeps: list[float]) -> None:
    client = OutlookClient(
        f"{sandbox}/login",
        f"{sandbox}/graph",
        DEFAULTS.graph_tenant_id,
        DEFAULTS.graph_client_id,
        DEFAULTS.graph_client_secret.get_secret_value(),
        "nobody@example.com",
        sleep=sleeps.append,
    )
    try:
        with pytest.raises(NotFoundError) as raised:
            client.send_mail(to=["team@example.com"], subject="Lost", html="<p>x</p>")
        with pytest.raises(NotFoundError):
            client.find_sent("report:morning:2026-11-30")
    finally:
        client.close()
    assert raised.value.status == 404
    assert "The requested user 'nobody@example.com' is invalid." in str(raised.value)
    assert control(sandbox, "GET", "/outbox")["messages"] == []


def _messages(*bodies: str) -> list[dict[str, str]]:
    mails = [MailText(sent_at=None, sender="buyer", subject="Offer", body=b) for b in bodies]
    return summary_messages(deal_name="ACME", mails=mails)


def test_mistral_sdk_gets_a_summary_that_passes_the_check(sandbox: str) -> None:
    messages = _messages("We like the offer. Price is high.", "Can you send a revised quote?")
    client = mistral(sandbox)
    try:
        result = client.summarise(messages=messages)
    finally:
        client.close()
    context = SummaryContext(deal_name="ACME", source_text=messages[-1]["content"])
    checked = check_summary(result.text, context)
    assert checked.line1 == "We like the offer."
    assert checked.line2 == "Can you send a revised quote?"
    assert result.usage.total_tokens > 0


def test_mistral_sdk_retries_an_injected_429(sandbox: str) -> None:
    fault = {"vendor": "mistral", "kind": "rate_limit", "count": 1, "retry_after": 0}
    control(sandbox, "POST", "/faults", fault)
    client = mistral(sandbox)
    try:
        assert client.summarise(messages=_messages("Price is high.")).text
    finally:
        client.close()
    stats = control(sandbox, "GET", "/stats")["requests"]["mistral"]
    assert stats.get("429") == 1
    assert stats.get("200") == 1


def test_mistral_invalid_output_comes_back_raw_and_fails_the_check(sandbox: str) -> None:
    fault = {
        "vendor": "mistral",
        "kind": "invalid_output",
        "count": 1,
        "content": "Sure! Two lines.",
    }
    control(sandbox, "POST", "/faults", fault)
    client = mistral(sandbox)
    try:
        answer = client.summarise(messages=_messages("Price is high."))
    finally:
        client.close()
    assert answer.text == "Sure! Two lines."
    with pytest.raises(SummaryRejected):
        check_summary(answer.text, SummaryContext(deal_name="ACME", source_text=""))


def test_resources_work_inside_a_dagster_run(sandbox: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import dagster as dg

    from followup_pipeline.integrations.resources import ClickUpResource, EspoCrmResource

    monkeypatch.setenv("TEST_ESPO_KEY", DEFAULTS.espocrm_api_key.get_secret_value())
    monkeypatch.setenv("TEST_CLICKUP_TOKEN", DEFAULTS.clickup_token.get_secret_value())
    seed_deals(sandbox, 3)

    @dg.op
    def task_per_deal(espocrm: EspoCrmResource, clickup: ClickUpResource) -> int:
        deals = espocrm.get_client().list_deals(stages=["Proposal"]).records
        for deal in deals:
            clickup.get_client().create_task(
                name=deal.name,
                markdown="",
                due_date=None,
                assignees=[],
                idempotency_key=f"task:{deal.id}:1",
            )
        return len(deals)

    @dg.job
    def probe() -> None:
        task_per_deal()

    result = probe.execute_in_process(
        resources={
            "espocrm": EspoCrmResource(
                base_url=f"{sandbox}/espocrm", api_key=dg.EnvVar("TEST_ESPO_KEY")
            ),
            "clickup": ClickUpResource(
                base_url=f"{sandbox}/clickup/api",
                token=dg.EnvVar("TEST_CLICKUP_TOKEN"),
                list_id=DEFAULTS.clickup_list_id,
            ),
        }
    )
    assert result.output_for_node("task_per_deal") == 3
    assert len(control(sandbox, "GET", "/clickup/tasks")["tasks"]) == 3


@pytest.mark.parametrize("legacy", [False, True])
def test_mistral_errors_in_either_shape_are_typed(legacy: bool) -> None:
    from mistralai.client.utils import BackoffStrategy, RetryConfig

    from followup_pipeline.sandbox.app import create_app
    from followup_pipeline_tests.support import served

    quick = RetryConfig("backoff", BackoffStrategy(1, 1, 1.0, 1), False)
    with served(create_app(SandboxConfig(mistral_legacy_errors=legacy))) as base:
        wrong = MistralClient("wrong-key", "m", server_url=f"{base}/mistral", retry_config=quick)
        try:
            with pytest.raises(PermanentError) as refused:
                wrong.summarise(messages=_messages("Price is high."))
        finally:
            wrong.close()
        assert refused.value.status == 401
        fault = {"vendor": "mistral", "kind": "rate_limit", "retry_after": 0}
        control(base, "POST", "/faults", fault)
        key = DEFAULTS.mistral_api_key.get_secret_value()
        client = MistralClient(key, "m", server_url=f"{base}/mistral", retry_config=quick)
        try:
            with pytest.raises(TransientError) as limited:
                client.summarise(messages=_messages("Price is high."))
        finally:
            client.close()
    assert limited.value.status == 429
