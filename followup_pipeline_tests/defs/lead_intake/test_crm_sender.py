"""The CRM sender's vendor part alone (look up, perform, read back) against an EspoCRM of Leads
held in memory behind ``httpx.MockTransport``: no database, no Dagster."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from followup_pipeline.defs.lead_intake.crm_sender import HELD, CrmLeadSender, LeadWrite
from followup_pipeline.domain.crm_lead import CrmLead
from followup_pipeline.integrations.errors import TransientError
from followup_pipeline.integrations.espocrm_leads import EspoLeadWriter
from followup_pipeline.store.lead_crm import LeadForCrm

EMAIL = "ada@example.com"
WANTED = {"firstName": "Ada", "lastName": "Lovelace", "emailAddress": EMAIL, "phoneNumber": "+49"}
NOW = datetime(2026, 3, 2, 9, tzinfo=UTC)


def _crm(held: dict[str, dict[str, Any]], log: list[str], *, down: bool = False) -> EspoLeadWriter:
    """A writer on an EspoCRM whose Leads are ``held`` by id; ``log`` lists each request."""

    def handler(request: httpx.Request) -> httpx.Response:
        log.append(f"{request.method} {request.url.path.removeprefix('/api/v1/')}")
        if down:
            return httpx.Response(503, json={"message": "down"})
        lead_id = request.url.path.rsplit("/", 1)[1]
        if request.method == "GET" and lead_id == "Lead":
            email = request.url.params["where[0][value]"]
            found = [lead for lead in held.values() if lead["emailAddress"] == email]
            return httpx.Response(200, json={"total": len(found), "list": found})
        if request.method == "GET":  # one Lead, by the id we hold
            lead = held.get(lead_id)
            return httpx.Response(404) if lead is None else httpx.Response(200, json=lead)
        body = json.loads(request.content)
        if request.method == "POST":
            lead_id = f"new{len(held) + 1}"
            held[lead_id] = {"id": lead_id}
        held[lead_id].update(body, modifiedAt="2026-03-02 09:00:00")
        return httpx.Response(200, json=held[lead_id])

    return EspoLeadWriter(
        "http://crm.test", "k", transport=httpx.MockTransport(handler), sleep=lambda _: None
    )


def _sender(
    writer: EspoLeadWriter, current: dict[str, Any] | None = None, *, ours: str | None = None
) -> CrmLeadSender:
    """The write of event 41 for lead 7 (``ours``: the CRM Lead the lead holds)."""
    lead = LeadForCrm(7, EMAIL, "Ada Lovelace", None, None, "site-form", ours, None, {})
    read = CrmLead(current["id"], None, current) if current is not None else None
    return CrmLeadSender(writer, LeadWrite(41, lead, read, WANTED), Counter())


#: What the CRM holds after a lost answer, and the Lead we hold → found, and the requests.
LOOK_UPS: dict[str, tuple[dict[str, dict[str, Any]], str | None, str | None, list[str]]] = {
    "the lost create made it": ({"L1": {"id": "L1", **WANTED}}, None, "L1", ["GET Lead"]),
    "a Lead that lacks a value": (
        {"L1": {"id": "L1", **WANTED, "phoneNumber": None}}, None, None, ["GET Lead"]),
    "no Lead of the address": (
        {"L9": {"id": "L9", **WANTED, "emailAddress": "x@y.z"}}, None, None, ["GET Lead"]),
    "the Lead we hold, its address edited": (  # a person's edit wins: it holds the write
        {"L9": {"id": "L9", **WANTED, "emailAddress": "x@y.z"}}, "L9", "L9", ["GET Lead/L9"]),
    "the Lead we hold, merged away": (
        {"L1": {"id": "L1", **WANTED}}, "L9", "L1", ["GET Lead/L9", "GET Lead"]),
}  # fmt: skip


@pytest.mark.parametrize(("held", "ours", "found", "requests"), LOOK_UPS.values(), ids=LOOK_UPS)
def test_crm_sender_looks_up_the_persons_lead_holding_the_write(
    held: dict[str, dict[str, Any]], ours: str | None, found: str | None, requests: list[str]
) -> None:
    log: list[str] = []
    sender = _sender(_crm(held, log), ours=ours)
    assert sender.look_up(sender.planned.spec(NOW, "live")) == found
    assert log == requests  # nothing written


def test_crm_sender_cannot_tell_while_the_crm_is_down() -> None:
    log: list[str] = []
    sender = _sender(_crm({}, log, down=True))
    with pytest.raises(TransientError):
        sender.look_up(sender.planned.spec(NOW, "live"))
    assert set(log) == {"GET Lead"}


#: The Lead read before the write → what goes out (after the touch), what was done, the note.
PERFORMS: dict[str, tuple[dict[str, Any] | None, list[str], str, str | None]] = {
    "no Lead: a create": (None, ["touch", "POST Lead"], "create", None),
    "a Lead that lacks a value: an update": (
        {"id": "L1", **WANTED, "phoneNumber": None}, ["touch", "PUT Lead/L1"], "update", None),
    "a Lead that holds it all: nothing": ({"id": "L1", **WANTED}, [], "unchanged", HELD),
}  # fmt: skip


@pytest.mark.parametrize(("current", "sent", "done", "note"), PERFORMS.values(), ids=PERFORMS)
def test_crm_sender_performs_after_its_touch_only_what_the_lead_lacks_and_reads_nothing_back(
    current: dict[str, Any] | None, sent: list[str], done: str, note: str | None
) -> None:
    held = {current["id"]: dict(current)} if current is not None else {}
    log: list[str] = []
    sender = _sender(_crm(held, log), current)
    spec = sender.planned.spec(NOW, "live")

    def touch() -> None:
        log.append("touch")

    performed = sender.perform(spec, touch)
    assert (log, sender.done, performed.note) == (sent, done, note)
    ref = performed.provider_ref
    assert ref is not None
    assert held[ref]["phoneNumber"] == "+49"
    if done == "update":  # it carries what the Lead lacked, and nothing else
        assert sender.planned.sending == {"phoneNumber": "+49"}
    assert sender.read_back(spec, ref) is None
    assert log == sent
