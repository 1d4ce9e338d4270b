"""The live demo: the sandbox keeps its world across restarts (a real process stopped as
``followup dev`` stops it), and its activity moves deals and adds e-mails as a team would."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from followup_pipeline.sandbox import SandboxConfig, create_app, persist, sandbox_state
from followup_pipeline.sandbox.activity import step
from followup_pipeline.sandbox.demo import demo_data
from followup_pipeline.sandbox.records import create_deal
from followup_pipeline_tests.support import free_port


def _serve(state_file: Path, port: int) -> subprocess.Popen[bytes]:
    followup = str(Path(sys.executable).with_name("followup"))
    argv = [followup, "sandbox", "--port", str(port), "--state-file", str(state_file)]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/_sandbox/stats", timeout=1).is_success:
                return process
        except httpx.HTTPError:
            time.sleep(0.2)
    process.kill()
    raise AssertionError("the sandbox did not start")


def _stop(process: subprocess.Popen[bytes]) -> str:
    process.send_signal(signal.SIGINT)
    out, _ = process.communicate(timeout=30)
    return out.decode()


def test_demo_sandbox_finds_its_deals_as_it_left_them(tmp_path: Path) -> None:
    state_file = tmp_path / "sandbox" / "state.json"
    port = free_port()
    first = _serve(state_file, port)
    control = f"http://127.0.0.1:{port}/_sandbox"
    deals = httpx.get(f"{control}/deals").json()["deals"]
    moved = next(d for d in deals if d["stage"] == "Prospecting")
    httpx.post(
        f"{control}/deals/{moved['id']}/stage", json={"stage": "Proposal"}
    ).raise_for_status()
    gone = next(d for d in deals if d["stage"] == "Negotiation")
    httpx.delete(f"{control}/deals/{gone['id']}").raise_for_status()
    _stop(first)
    assert os.stat(state_file).st_mode & 0o777 == 0o600

    second = _serve(state_file, port)
    try:
        after = {d["id"]: d for d in httpx.get(f"{control}/deals").json()["deals"]}
    finally:
        out = _stop(second)
    assert f"sandbox: {len(deals) - 1} deal(s) as kept in {state_file}" in out
    assert after[moved["id"]]["stage"] == "Proposal"
    assert gone["id"] not in after
    assert len(after) == len(deals) - 1  # no demo data on top


def test_demo_an_unreadable_state_file_is_set_aside(tmp_path: Path) -> None:
    state_file = tmp_path / "state.json"
    state_file.write_text("{not json")
    app = create_app(SandboxConfig(state_file=state_file))
    assert app.state.kept is False
    assert (tmp_path / "state.json.unreadable").read_text() == "{not json"
    assert sandbox_state(app).deals == {}


def test_demo_activity_moves_deals_and_writes_mail() -> None:
    app = create_app(SandboxConfig(webhook_url="http://127.0.0.1:9/none"))
    state = sandbox_state(app)
    for deal in demo_data(0):
        create_deal(state, deal, webhooks=False)
    before = {d["id"]: d["stage"] for d in state.deals.values()}
    emails = sum(len(state.activity(i, "emails")) for i in before)
    rng = random.Random(7)
    lines = [step(state, rng) for _ in range(60)]
    kinds = Counter(line.rpartition(": ")[2] for line in lines)
    assert kinds["Proposal"] > 0
    assert kinds["an e-mail"] > 0
    assert kinds["Negotiation"] + kinds["Closed Won"] + kinds["Closed Lost"] > 0
    assert sum(len(state.activity(i, "emails")) for i in state.deals) > emails
    # Each stage change is queued as EspoCRM's webhooks, for the machine's ingress.
    events = Counter(item.webhook_id for item in state.webhooks.queue)
    assert sum(events.values()) >= kinds["Proposal"]
    # Prospects keep coming: the demo never runs dry.
    early = [d for d in state.deals.values() if d["stage"] in ("Prospecting", "Qualification")]
    assert len(early) >= 2


@pytest.mark.parametrize("seed", [1, 2])
def test_demo_activity_never_fails(seed: int) -> None:
    app = create_app(SandboxConfig())
    state = sandbox_state(app)
    rng = random.Random(seed)
    for _ in range(300):  # from an empty CRM: prospects first, then everything else
        assert step(state, rng)
    assert state.deals


def test_demo_data_deals_close_and_calls_end_after_they_start() -> None:
    deals = demo_data(3, datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    assert all(len(deal["closeDate"]) == 10 for deal in deals)
    calls = [call for deal in deals for call in deal["calls"]]
    meetings = [meeting for deal in deals for meeting in deal["meetings"]]
    assert {call["direction"] for call in calls} == {"Inbound", "Outbound"}
    assert all(item["dateEnd"] > item["dateStart"] for item in calls + meetings)
    app = create_app(SandboxConfig())
    state = sandbox_state(app)
    for deal in deals:
        create_deal(state, deal, webhooks=False)
    kept = [c for links in state.activities.values() for c in links.get("calls", [])]
    assert all(c["duration"] in (600, 900, 1200, 1500) for c in kept)


def test_demo_kept_world_keeps_mailboxes_and_completes_older_records(tmp_path: Path) -> None:
    state_file = tmp_path / "state.json"
    first = create_app(SandboxConfig(state_file=state_file))
    state = sandbox_state(first)
    create_deal(
        state, {"id": "d1", "calls": [{"dateStart": "2026-03-04 10:00:00"}]}, webhooks=False
    )
    state.mailboxes.append("ops@example.com")
    # A world kept by an older sandbox: no closeDate, a call without direction and dateEnd.
    state.deals["d1"]["closeDate"] = None
    (call,) = state.activity("d1", "calls")
    call["direction"] = call["dateEnd"] = None
    persist.save(state, state_file)
    os.close(state.lock_fd or -1)
    second = sandbox_state(create_app(SandboxConfig(state_file=state_file)))
    assert second.mailboxes == ["followup@example.com", "ops@example.com"]
    assert second.deals["d1"]["closeDate"]
    (call,) = second.activity("d1", "calls")
    assert (call["direction"], call["dateEnd"]) == ("Outbound", "2026-03-04 10:05:00")
