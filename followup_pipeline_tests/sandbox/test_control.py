"""The control API, demo data, the env lines and the command's arguments."""

import os
import re
import shlex
import subprocess
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from followup_pipeline.sandbox import SandboxConfig, demo_data, env_lines
from followup_pipeline.sandbox.config import DEFAULT_STAGES
from followup_pipeline.sandbox.server import parser
from followup_pipeline.settings import Settings
from followup_pipeline_tests.sandbox.conftest import ESPO, Sandbox

pytestmark = pytest.mark.anyio


async def test_control_deals_get_espocrm_ids_and_sandbox_clock_times(sandbox: Sandbox) -> None:
    await sandbox.client.post("/_sandbox/clock", json={"now": "2026-03-02T08:00:00+00:00"})
    deal = await sandbox.deal(name="A", stage="Proposal")
    assert re.fullmatch(r"[0-9a-f]{17}", deal["id"])
    assert deal["createdAt"].startswith("2026-03-02 08:00:")
    await sandbox.client.post("/_sandbox/clock", json={"advance_seconds": 3600})
    moved = await sandbox.client.post(
        f"/_sandbox/deals/{deal['id']}/stage", json={"stage": "Negotiation"}
    )
    assert moved.json()["modifiedAt"].startswith("2026-03-02 09:00:")
    bad = await sandbox.client.post(f"/_sandbox/deals/{deal['id']}/stage", json={"stage": "Nope"})
    assert bad.status_code == 400


async def test_control_stage_move_queues_both_webhook_events(sandbox: Sandbox) -> None:
    deal = await sandbox.deal(name="A")
    await sandbox.client.post(f"/_sandbox/deals/{deal['id']}/stage", json={"stage": "Proposal"})
    queue = (await sandbox.client.get("/_sandbox/webhooks")).json()["queue"]
    assert {"id": deal["id"], "stage": "Proposal"} in [item["data"] for item in queue]
    assert len(queue) == 2


async def test_control_activity_delete_and_reset(sandbox: Sandbox) -> None:
    deal = await sandbox.deal(name="A")
    made = await sandbox.client.post(
        f"/_sandbox/deals/{deal['id']}/emails", json={"subject": "Hallo", "body": "Text"}
    )
    assert made.status_code == 201
    await sandbox.client.post(f"/_sandbox/deals/{deal['id']}/calls", json=[{"name": "c"}])
    await sandbox.client.post(f"/_sandbox/deals/{deal['id']}/meetings", json={"meetings": [{}]})
    url = f"/espocrm/api/v1/Opportunity/{deal['id']}"
    for link in ("emails", "calls", "meetings"):
        assert (await sandbox.client.get(f"{url}/{link}", headers=ESPO)).json()["total"] == 1
    assert (await sandbox.client.delete(f"/_sandbox/deals/{deal['id']}")).status_code == 200
    assert (await sandbox.client.get(url, headers=ESPO)).status_code == 404
    assert (await sandbox.client.delete(f"/_sandbox/deals/{deal['id']}")).status_code == 404
    reset = await sandbox.client.post("/_sandbox/reset", json={"demo": True, "seed": 3})
    assert reset.json() == {"ok": True, "deals": 48}
    assert len((await sandbox.client.get("/_sandbox/deals")).json()["deals"]) == 48


async def test_control_stats_count_requests_per_vendor_and_status(sandbox: Sandbox) -> None:
    await sandbox.client.get("/espocrm/api/v1/Opportunity", headers=ESPO)
    await sandbox.client.get("/espocrm/api/v1/Opportunity")
    await sandbox.client.post("/mistral/v1/chat/completions")
    await sandbox.client.put("/espocrm/api/v1/Opportunity/x", json={}, headers=ESPO)
    await sandbox.client.post("/espocrm/api/v1/Lead", json={"lastName": "L"}, headers=ESPO)
    stats = (await sandbox.client.get("/_sandbox/stats")).json()
    assert stats == {
        "requests": {"espocrm": {"200": 2, "401": 1, "404": 1}, "mistral": {"401": 1}},
        "total": 5,
        # What may change something, by method and entity, whatever the answer.
        "writes": {"espocrm": {"PUT Opportunity": 1, "POST Lead": 1}, "mistral": {"POST": 1}},
    }


def test_demo_data_covers_every_stage_in_two_languages() -> None:
    now = datetime(2026, 3, 2, 9, tzinfo=UTC)
    deals = demo_data(5, now)
    assert len(deals) >= 40
    assert set(Counter(d["stage"] for d in deals)) == set(DEFAULT_STAGES)
    bodies = " ".join(e["body"] for d in deals for e in d["emails"])
    assert "Angebot" in bodies
    assert "proposal" in bodies
    assert any(d["calls"] for d in deals)
    assert any(d["meetings"] for d in deals)
    assert demo_data(5, now) == deals
    assert demo_data(6, now) != deals


def test_env_lines_configure_the_machine_for_the_sandbox(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = SandboxConfig()
    lines = env_lines(config, "http://127.0.0.1:8765/")
    env_file = tmp_path / "sandbox.env"
    env_file.write_text("\n".join(lines) + "\n")
    # What an operator does: `source` the file in a shell, then read the environment back.
    shell = subprocess.run(
        ["bash", "-c", f"set -a; source {shlex.quote(str(env_file))}; env -0"],
        capture_output=True,
        check=True,
        env={"PATH": os.environ.get("PATH", "")},
    )
    pairs = (item.split("=", 1) for item in shell.stdout.decode().split("\0") if "=" in item)
    values = {name: value for name, value in pairs if name.startswith("FOLLOWUP_")}
    assert len(values) == len(lines)
    assert values["FOLLOWUP_ESPOCRM_URL"] == "http://127.0.0.1:8765/espocrm"
    assert values["FOLLOWUP_CLICKUP_URL"] == "http://127.0.0.1:8765/clickup/api"
    assert values["FOLLOWUP_GRAPH_LOGIN_URL"] == "http://127.0.0.1:8765/login"
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    settings = Settings(_env_file=None)
    assert settings.mistral_api_key is not None
    assert settings.sandbox_credentials_missing() == []
    assert [hook.id for hook in settings.espocrm_webhooks] == [hook.id for hook in config.webhooks]
    assert str(settings.graph_url).rstrip("/") == "http://127.0.0.1:8765/graph"


def test_server_parser_defaults_to_loopback() -> None:
    args = parser().parse_args([])
    assert (args.host, args.port, args.seed, args.no_demo_data) == ("127.0.0.1", 8765, 0, False)
    args = parser().parse_args(
        [
            "--port",
            "9000",
            "--seed",
            "4",
            "--webhook-url",
            "http://x/h",
            "--env-file",
            "sandbox.env",
            "--no-demo-data",
        ]
    )
    assert (args.port, args.seed, args.webhook_url, args.no_demo_data) == (
        9000,
        4,
        "http://x/h",
        True,
    )


def test_env_lines_send_from_a_mailbox_the_sandbox_has() -> None:
    config = SandboxConfig(graph_mailboxes=["reports@example.com", "ops@example.com"])
    values = dict(line.split("=", 1) for line in env_lines(config, "http://127.0.0.1:8765"))
    # Any other sender would be Graph's 404 ErrorInvalidUser.
    assert values["FOLLOWUP_GRAPH_SENDER"] == "reports@example.com"
    # By default, the machine's own default sender.
    default = dict(line.split("=", 1) for line in env_lines(SandboxConfig(), "http://x"))
    assert default["FOLLOWUP_GRAPH_SENDER"] == Settings.model_fields["graph_sender"].default
