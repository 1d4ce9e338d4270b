"""Settings: defaults, sources, and wrong values named with what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from followup_pipeline.settings import ConfigError, load_settings


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("FOLLOWUP_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def test_settings_defaults() -> None:
    settings = load_settings()
    assert settings.timezone == "Europe/Berlin"
    assert settings.holiday_country == "DE"
    assert settings.holiday_subdivision is None
    assert settings.watched_stages == ["Proposal", "Negotiation"]
    assert settings.cadence == [5, 12, 21]
    assert settings.database_url is None
    assert settings.home.is_absolute()
    assert not settings.dry_run


@pytest.mark.parametrize(
    ("variable", "value", "named", "allowed"),
    [
        ("FOLLOWUP_TIMEZONE", "Europe/Berln", "FOLLOWUP_TIMEZONE", "Europe/Berlin"),
        ("FOLLOWUP_HOLIDAY_COUNTRY", "XY", "FOLLOWUP_HOLIDAY_COUNTRY", "DE"),
        ("FOLLOWUP_HOLIDAY_SUBDIVISION", "ZZ", "FOLLOWUP_HOLIDAY_SUBDIVISION", "BY"),
        ("FOLLOWUP_ESPOCRM_URL", "crm.example.com", "FOLLOWUP_ESPOCRM_URL", "URL"),
        ("FOLLOWUP_CADENCE", "12,5", "FOLLOWUP_CADENCE", "strictly increasing"),
        ("FOLLOWUP_NOW", "2026-03-02T09:00:00", "FOLLOWUP_NOW", "offset"),
        (
            "FOLLOWUP_ESPOCRM_WEBHOOKS",
            '[{"id": "a", "event": "Lead.create", "secret": "s"}]',
            "FOLLOWUP_ESPOCRM_WEBHOOKS",
            "Opportunity.fieldUpdate.stage",
        ),
        ("FOLLOWUP_DRY_RUN", "perhaps", "FOLLOWUP_DRY_RUN", "boolean"),
        ("FOLLOWUP_BUSINESS_HOURS_END", "17", "FOLLOWUP_BUSINESS_HOURS_END", "EVALUATE_HOURS"),
    ],
)
def test_settings_wrong_value_names_variable_and_allowed_values(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, named: str, allowed: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert named in str(caught.value)
    assert allowed in str(caught.value)


def test_settings_lists_accept_commas_and_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FOLLOWUP_WATCHED_STAGES", "Angebot, Verhandlung")
    monkeypatch.setenv("FOLLOWUP_REPORT_RECIPIENTS", '["a@example.com", "b@example.com"]')
    monkeypatch.setenv("FOLLOWUP_CADENCE", "[3, 7]")
    settings = load_settings()
    assert settings.watched_stages == ["Angebot", "Verhandlung"]
    assert settings.report_recipients == ["a@example.com", "b@example.com"]
    assert settings.cadence == [3, 7]


def test_settings_secrets_are_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FOLLOWUP_CLICKUP_TOKEN", "pk_very_secret")
    monkeypatch.setenv(
        "FOLLOWUP_ESPOCRM_WEBHOOKS",
        '[{"id": "wh1", "event": "Opportunity.fieldUpdate.stage", "secret": "hook-secret"}]',
    )
    settings = load_settings()
    assert settings.clickup_token is not None
    assert settings.clickup_token.get_secret_value() == "pk_very_secret"
    assert "pk_very_secret" not in repr(settings)
    assert "hook-secret" not in repr(settings)
    assert settings.espocrm_webhooks[0].secret.get_secret_value() == "hook-secret"


def test_settings_read_dotenv_and_secrets_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / ".env").write_text("FOLLOWUP_TIMEZONE=Europe/Vienna\n")
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "followup_mistral_api_key").write_text("mistral-key")
    monkeypatch.setenv("FOLLOWUP_SECRETS_DIR", str(secrets))
    settings = load_settings()
    assert settings.timezone == "Europe/Vienna"
    assert settings.mistral_api_key is not None
    assert settings.mistral_api_key.get_secret_value() == "mistral-key"


def test_settings_missing_credentials_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    assert len(load_settings().sandbox_credentials_missing()) == 4
    monkeypatch.setenv("FOLLOWUP_CLICKUP_TOKEN", "pk_x")
    assert "FOLLOWUP_CLICKUP_TOKEN" not in load_settings().sandbox_credentials_missing()


def test_settings_in_flight_window_follows_the_client_timeouts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FOLLOWUP_VENDOR_TIMEOUT_S", "10")
    monkeypatch.setenv("FOLLOWUP_VENDOR_CONNECT_TIMEOUT_S", "2")
    monkeypatch.setenv("FOLLOWUP_ACTION_IN_FLIGHT_MARGIN_S", "5")
    settings = load_settings()
    assert settings.vendor_timeouts().httpx().read == 10
    assert settings.in_flight_s() == 2 * 2 + 2 * 10 + 5
    monkeypatch.setenv("FOLLOWUP_ACTION_IN_FLIGHT_S", "3")
    assert load_settings().in_flight_s() == 3
