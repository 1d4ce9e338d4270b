"""Dagster resources: config from EnvVar, client built in setup and closed in teardown."""

import dagster as dg
import pytest

from followup_pipeline.integrations.clickup import ClickUpClient
from followup_pipeline.integrations.espocrm import EspoCrmClient
from followup_pipeline.integrations.mistral import MistralClient
from followup_pipeline.integrations.outlook import OutlookClient
from followup_pipeline.integrations.resources import (
    ClickUpResource,
    EspoCrmResource,
    MistralResource,
    OutlookResource,
)

RESOURCES = {
    "espocrm": (
        EspoCrmResource(base_url="http://crm.test", api_key=dg.EnvVar("TEST_SECRET")),
        EspoCrmClient,
    ),
    "clickup": (
        ClickUpResource(base_url="http://cu.test/api", token=dg.EnvVar("TEST_SECRET"), list_id="l"),
        ClickUpClient,
    ),
    "outlook": (
        OutlookResource(
            login_url="http://login.test",
            graph_url="http://graph.test",
            tenant_id="t",
            client_id="c",
            client_secret=dg.EnvVar("TEST_SECRET"),
            sender="s@example.com",
        ),
        OutlookClient,
    ),
    "mistral": (
        MistralResource(base_url="http://m.test", api_key=dg.EnvVar("TEST_SECRET"), model="m"),
        MistralClient,
    ),
}


@pytest.mark.parametrize("key", sorted(RESOURCES))
def test_resource_builds_client_in_setup_and_closes_it(
    key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_SECRET", "s3cret-value")
    resource, client_type = RESOURCES[key]
    with dg.build_resources({key: resource}) as built:
        live = getattr(built, key)
        assert isinstance(live._client, client_type)
    assert live._client is None


@pytest.mark.parametrize("key", sorted(RESOURCES))
def test_resource_builds_its_own_client_outside_a_run(key: str) -> None:
    _, client_type = RESOURCES[key]
    plain = {
        "espocrm": lambda: EspoCrmResource(base_url="http://crm.test", api_key="k"),
        "clickup": lambda: ClickUpResource(base_url="http://cu.test/api", token="t", list_id="l"),
        "outlook": lambda: OutlookResource(
            login_url="http://login.test",
            graph_url="http://graph.test",
            tenant_id="t",
            client_id="c",
            client_secret="s",
            sender="s@example.com",
        ),
        "mistral": lambda: MistralResource(base_url="http://m.test", api_key="k", model="m"),
    }[key]
    first, second = plain(), plain()
    assert isinstance(first.get_client(), client_type)
    assert first.get_client() is first.get_client()  # built once
    assert first.get_client() is not second.get_client()  # never shared between resources


def test_resource_reaches_an_op_with_its_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_SECRET", "pk_123")

    @dg.op
    def list_of(clickup: ClickUpResource) -> str:
        return clickup.get_client().list_id

    @dg.job
    def probe() -> None:
        list_of()

    result = probe.execute_in_process(resources={"clickup": RESOURCES["clickup"][0]})
    assert result.output_for_node("list_of") == "l"


def test_resource_config_shows_env_var_name_not_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_SECRET", "s3cret-value")
    assert "s3cret-value" not in repr(RESOURCES["outlook"][0])
