"""``followup doctor`` without a running Dagster: each vendor's fault on its own line, the ClickUp
list's closed status, webhooks that stopped coming, their times in the team's zone, and no
machine at all. (All green, with the daemon and a switched-off schedule:
defs/register/test_daemon.py.)"""

from __future__ import annotations

import shlex
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from followup_pipeline.cli import main
from followup_pipeline.commands import doctor
from followup_pipeline.commands.doctor import webhook_check
from followup_pipeline.commands.probes import ok
from followup_pipeline.sandbox.config import SandboxConfig
from followup_pipeline.sandbox.environment import env_lines
from followup_pipeline.settings import SECRET_VARIABLES
from followup_pipeline_tests.support import free_port

SANDBOX = SandboxConfig()
NOW = datetime(2026, 3, 3, 9, 0, tzinfo=UTC)
ZONE = "Europe/Berlin"


def _sandbox_credentials(monkeypatch: pytest.MonkeyPatch, sandbox: str, db_url: str) -> None:
    """Every vendor setting pointing at the sandbox, as ``followup sandbox --env-file`` writes."""
    monkeypatch.setenv("FOLLOWUP_DATABASE_URL", db_url)
    monkeypatch.setenv("FOLLOWUP_INGRESS_PORT", str(free_port()))  # no ingress listens there
    for line in env_lines(SANDBOX, sandbox):
        name, _, value = line.partition("=")
        monkeypatch.setenv(name, shlex.split(value)[0])
    monkeypatch.setenv("FOLLOWUP_OPS_OWNER", "owner@example.com")
    monkeypatch.setenv("FOLLOWUP_OPS_BACKUP", "backup@example.com")


def _faults(out: str) -> set[str]:
    """The names of the checks that did not pass."""
    return {
        line.split(":")[0].split(maxsplit=1)[1]
        for line in out.splitlines()
        if line.startswith(("FAIL ", "WARN "))
    }


def test_doctor_reads_the_lists_closed_status(
    sandbox: str, db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _sandbox_credentials(monkeypatch, sandbox, db_url)
    main(["doctor"])
    out = capsys.readouterr().out
    assert "ok   clickup: list sandbox-list closes tasks with status 'complete'" in out
    # A fresh installation: lead intake in shadow, seeded by the setting's default.
    assert "ok   lead intake: shadow (since " in out
    assert "nothing is written to the CRM" in out
    for vendor in ("espocrm", "clickup", "outlook", "mistral"):
        assert f"ok   {vendor}: " in out
    assert (
        "ok   alerts: mail to owner@example.com, backup@example.com; ClickUp list sandbox-ops "
        "when mail fails" in out
    )
    # The sandbox's environment names the demo's report recipients.
    assert (
        "ok   reports: sent to sales-team@example.com, sales-lead@example.com; 3 salesperson(s) "
        "get their own morning list" in out
    )
    # The census of each watched stage: nothing read yet on a fresh installation.
    census = "ok   census Proposal: no reading yet; entered by week, this week first: 0, 0, 0, 0"
    assert census in out
    assert "ok   watchdog: none has looked on this machine yet" in out
    # No daemon, no ingress and no Dagster instance here: exactly those fail.
    assert _faults(out) == {"dagster", "ingress"}


@pytest.mark.parametrize(
    ("variable", "value", "fault", "words"),
    [
        # The alert list is in ClickUp too: a wrong token fails it as well (below).
        ("FOLLOWUP_CLICKUP_TOKEN", "pk_wrong", "clickup", "401"),
        ("FOLLOWUP_ESPOCRM_API_KEY", "wrong", "espocrm", "401"),
        ("FOLLOWUP_GRAPH_CLIENT_SECRET", "wrong", "outlook", "invalid_client"),
        ("FOLLOWUP_MISTRAL_API_KEY", "wrong", "mistral", "401"),
        (
            "FOLLOWUP_WATCHED_STAGES",
            "Proposal,Negotation",
            "espocrm",
            "FOLLOWUP_WATCHED_STAGES 'Negotation': no such stage in the CRM",
        ),
        ("FOLLOWUP_CLICKUP_LIST_ID", "no-such-list", "clickup", "no-such-list"),
        ("FOLLOWUP_OPS_CLICKUP_LIST_ID", "no-such-list", "alerts", "no-such-list"),
        ("FOLLOWUP_OPS_OWNER", "", "alerts", "FOLLOWUP_OPS_OWNER"),
        ("FOLLOWUP_COMPANY_LOOKUP_API_KEY", "wrong", "company lookup", "401"),
    ],
)
def test_doctor_names_exactly_the_vendor_at_fault(
    variable: str,
    value: str,
    fault: str,
    words: str,
    sandbox: str,
    db_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _sandbox_credentials(monkeypatch, sandbox, db_url)
    monkeypatch.setenv(variable, value)
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    # The list's members are read with the same token from the same list.
    also = {"alerts"} if variable == "FOLLOWUP_CLICKUP_TOKEN" else set()
    if variable in ("FOLLOWUP_CLICKUP_TOKEN", "FOLLOWUP_CLICKUP_LIST_ID"):
        also.add("clickup users")
    assert _faults(out) == {"dagster", "ingress", fault} | also
    [line] = [
        line for line in out.splitlines() if line.startswith((f"FAIL {fault}: ", f"WARN {fault}: "))
    ]
    assert words in line
    if variable in SECRET_VARIABLES.values():
        assert value not in out  # no secret echoed
    *checks, summary = out.splitlines()
    assert all(line.startswith(("ok   ", "WARN ", "FAIL ")) for line in checks), out
    warnings = sum(line.startswith("WARN ") for line in checks)
    faults = 3 + len(also) - warnings
    assert warnings == (1 if variable == "FOLLOWUP_OPS_OWNER" else 0)
    # one line each, none folded; warnings counted apart from faults
    assert (
        summary == f"{len(checks) - faults - warnings} ok, {warnings} warning(s), {faults} fault(s)"
    )


def test_doctor_warns_of_unset_recipients_and_owner_and_exits_0(
    sandbox: str,
    db_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A fresh demo: no recipients, no alert owner. Both are warnings, not faults."""
    _sandbox_credentials(monkeypatch, sandbox, db_url)
    for variable in ("FOLLOWUP_REPORT_RECIPIENTS", "FOLLOWUP_OPS_OWNER", "FOLLOWUP_OPS_BACKUP"):
        monkeypatch.setenv(variable, "")
    # What a running machine has and this test has not (no Dagster, no ingress): passed over.
    monkeypatch.setattr(doctor, "_dagster", lambda settings: iter([ok("dagster", "stubbed")]))
    monkeypatch.setattr(doctor, "_ingress", lambda settings: ok("ingress", "stubbed"))
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert _faults(out) == {"reports", "alerts"}
    assert "WARN reports: FOLLOWUP_REPORT_RECIPIENTS is not set" in out
    assert "WARN alerts: FOLLOWUP_OPS_OWNER and FOLLOWUP_OPS_BACKUP are not set" in out
    assert out.splitlines()[-1].endswith(" ok, 2 warning(s), 0 fault(s)")


def test_doctor_fails_on_a_closed_status_the_list_does_not_have(
    sandbox: str, db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _sandbox_credentials(monkeypatch, sandbox, db_url)
    monkeypatch.setenv("FOLLOWUP_CLICKUP_CLOSED_STATUS", "closed")
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "FAIL clickup: FOLLOWUP_CLICKUP_CLOSED_STATUS 'closed' is no closed-type" in out
    assert "(closed-type: 'complete')" in out


def test_doctor_says_when_there_is_no_machine(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FOLLOWUP_DATABASE_URL", raising=False)
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "FAIL database: no machine at" in out
    assert "FAIL dagster: no instance at" in out


def _reconciled_watch(db: psycopg.Connection[Any], at: datetime, deal: str) -> None:
    db.execute(
        "INSERT INTO watches (subject_id, subject_name, stage, cadence_name, offsets, time_zone,"
        " base_on, registered_at, registered_by) VALUES (%s, 'Offer', 'Proposal', 'default',"
        " '{5,12,21}', 'Europe/Berlin', %s, %s, 'reconcile')",
        (deal, at.date(), at),
    )


def test_doctor_explains_webhooks_that_stopped_while_deals_change(
    db: psycopg.Connection[Any],
) -> None:
    assert (
        "the CRM's watched deals did not change either"
        in webhook_check(db, now=NOW, zone=ZONE).line()
    )
    # The machine's first reconciliation brings in the deals that were there: no webhook was due.
    _reconciled_watch(db, NOW - timedelta(hours=3), "d0")
    assert "did not change either" in webhook_check(db, now=NOW, zone=ZONE).line()
    _reconciled_watch(db, NOW - timedelta(hours=1), "d1")  # a deal that changed since
    line = webhook_check(db, now=NOW, zone=ZONE).line()
    assert line.startswith("WARN webhooks: none for a day while reconciliation opened 1")
    assert "webhookAllowedAddressList" in line
    db.execute(
        "INSERT INTO events (source, event_type, dedup_key, body, received_at)"
        " VALUES ('espocrm', 'Opportunity.create', 'k', '\\x5b5d', %s)",
        (NOW - timedelta(hours=1),),
    )
    assert webhook_check(db, now=NOW, zone=ZONE).line() == (
        "ok   webhooks: the last one arrived 2026-03-03 09:00 CET"
    )


def _webhook(db: psycopg.Connection[Any], at: datetime) -> None:
    db.execute(
        "INSERT INTO events (source, event_type, dedup_key, body, received_at)"
        " VALUES ('espocrm', 'Opportunity.create', %s, '\\x5b5d', %s)",
        (f"k-{at.isoformat()}", at),
    )


def test_doctor_tells_webhook_times_in_the_teams_zone(db: psycopg.Connection[Any]) -> None:
    """As a person reads them: the team's local time with its zone, never raw UTC."""
    _webhook(db, NOW - timedelta(days=2))  # 2026-03-01 09:00 UTC
    assert webhook_check(db, now=NOW, zone="America/New_York").line() == (
        "ok   webhooks: none since 2026-03-01 04:00 EST; the CRM's watched deals did not change "
        "either"
    )
    _webhook(db, NOW - timedelta(minutes=30))
    assert webhook_check(db, now=NOW, zone="Asia/Tokyo").line() == (
        "ok   webhooks: the last one arrived 2026-03-03 17:30 JST"
    )


def test_doctor_prints_the_last_webhook_in_followup_timezone(
    sandbox: str,
    db_url: str,
    db: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _sandbox_credentials(monkeypatch, sandbox, db_url)
    monkeypatch.setenv("FOLLOWUP_TIMEZONE", "America/New_York")
    monkeypatch.setenv("FOLLOWUP_NOW", NOW.isoformat())
    _webhook(db, NOW - timedelta(hours=1))
    main(["doctor"])
    out = capsys.readouterr().out
    assert "ok   webhooks: the last one arrived 2026-03-03 03:00 EST\n" in out


def test_doctor_checks_the_user_map_against_the_lists_members_and_the_recipients(
    sandbox: str, db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _sandbox_credentials(monkeypatch, sandbox, db_url)
    main(["doctor"])
    out = capsys.readouterr().out
    assert "ok   clickup users: 3 mapped to members: Sabine Vogel, Tom Becker, Grace Lee" in out
    monkeypatch.setenv("FOLLOWUP_CLICKUP_USER_MAP", '{"5f1a0c2b3d4e5f601": 99999}')
    monkeypatch.setenv("FOLLOWUP_REPORT_RECIPIENTS", "team@example.com,sales-lead.example.com")
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "CRM user 5f1a0c2b3d4e5f601 -> ClickUp 99999" in out
    assert "FAIL reports: no e-mail address: 'sales-lead.example.com'" in out


def test_doctor_names_an_academy_whose_moodle_is_away_and_prints_every_mode(
    sandbox: str,
    db_url: str,
    db: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from followup_pipeline_tests.defs.lms.lms_world import BERLIN, NEW_YORK, control, make_tenant

    _sandbox_credentials(monkeypatch, sandbox, db_url)
    make_tenant(db, sandbox, BERLIN, 1, credential_token_ref="ACADEMY_BERLIN_CREDENTIALS",
                credential_groups={"1": 9549})  # fmt: skip
    make_tenant(db, sandbox, NEW_YORK, 1, mode="dry")
    main(["doctor"])
    out = capsys.readouterr().out
    assert "ok   modes: deal follow-up live; lead intake shadow; academies: " in out
    assert f"{BERLIN} live, {NEW_YORK} dry" in out
    assert f"ok   moodle {BERLIN}: {sandbox}/moodle/{BERLIN}: " in out
    assert "token accepted; Moodle not reached by any run yet" in out
    assert f"ok   credentials {BERLIN}: " in out
    assert "ok   company lookup: " in out
    # New York's Moodle answers 503: exactly its line fails, naming the answer.
    control(sandbox, "POST", "/faults", {"vendor": "moodle", "kind": "error", "status": 503,
                                        "path": NEW_YORK})  # fmt: skip
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    # A live academy's links lead to this machine's loopback: no learner could open them.
    assert _faults(out) == {"dagster", "ingress", "links", f"moodle {NEW_YORK}"}, out
    [line] = [line for line in out.splitlines() if line.startswith(f"FAIL moodle {NEW_YORK}: ")]
    assert "HTTP 503" in line


def test_doctor_fails_links_a_learner_cannot_open() -> None:
    from followup_pipeline.commands.probes_learning import links
    from followup_pipeline.settings import load_settings
    from followup_pipeline.store.lms import Tenant

    live = [Tenant(id="academy", name="A", moodle_url="", token_ref="A", time_zone="UTC",
                   mode="live")]  # fmt: skip
    here = links(load_settings(), live, mode="real")
    assert here.level == "FAIL"
    assert "FOLLOWUP_LINKS_URL" in here.detail
    assert "FOLLOWUP_HOME/link-keys" in here.detail  # a key made once, named by where it is
    public = load_settings(
        links_url="https://followup.example.org", link_keys="new:" + "s" * 40 + ",old:" + "o" * 40
    )
    line = links(public, live, mode="real")
    assert (line.level, line.detail) == (
        "ok", "https://followup.example.org/links/…, signed by key 'new' (2 in FOLLOWUP_LINK_KEYS)"
    )  # fmt: skip
    assert links(load_settings(), live, mode="sandbox").level == "ok"  # the demo's own machine
