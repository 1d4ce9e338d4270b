"""Changes to the CRM's records, made as EspoCRM makes them: timestamps, ids, webhooks."""

from datetime import date, datetime, timedelta
from typing import Any

from followup_pipeline.sandbox.espocrm import LINK_ATTRIBUTES, OPPORTUNITY_ATTRIBUTES
from followup_pipeline.sandbox.state import Record, SandboxState

ACTIVITY_KINDS = tuple(LINK_ATTRIBUTES)
#: EspoCRM's datetime format (UTC).
ESPO_DATETIME = "%Y-%m-%d %H:%M:%S"
#: ``duration``'s default in EspoCRM's entityDefs: 5 minutes a call, an hour a meeting.
DEFAULT_DURATION = {"calls": 300, "meetings": 3600}
#: ``Call.direction``'s options; the first is the default.
CALL_DIRECTIONS = ("Outbound", "Inbound")
#: A seeded deal without ``closeDate`` (required in EspoCRM) closes this many days after it
#: was created.
CLOSE_AFTER_DAYS = 30


class RecordError(ValueError):
    """A control request that cannot be applied (unknown deal, unknown stage, ...)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _deal_record(state: SandboxState, data: dict[str, Any]) -> Record:
    now = state.clock.espo()
    stage = data.get("stage", state.config.espocrm_stages[0])
    if stage not in state.config.espocrm_stages:
        raise RecordError(400, f"unknown stage {stage!r}; allowed: {state.config.espocrm_stages}")
    record: Record = dict.fromkeys(OPPORTUNITY_ATTRIBUTES)
    record.update(
        {"amountCurrency": "EUR", "description": None, "createdAt": now, "modifiedAt": now}
    )
    record.update({k: v for k, v in data.items() if k in OPPORTUNITY_ATTRIBUTES})
    record["id"] = str(data.get("id") or state.new_id())  # EspoCRM ids are strings
    record["name"] = data.get("name") or f"Deal {record['id'][:6]}"
    record["stage"] = stage
    if record["closeDate"] is None:  # required in EspoCRM: every deal has one
        close = state.clock.now() + timedelta(days=CLOSE_AFTER_DAYS)
        record["closeDate"] = close.strftime("%Y-%m-%d")
    elif not _is_date(record["closeDate"]):
        raise RecordError(400, f"closeDate {record['closeDate']!r} is not a date YYYY-MM-DD")
    if isinstance(record.get("amount"), int):
        record["amount"] = float(record["amount"])
    return record


def _is_date(value: Any) -> bool:
    try:
        return isinstance(value, str) and len(value) == 10 and bool(date.fromisoformat(value))
    except ValueError:
        return False


def _moment(value: Any, name: str) -> datetime:
    try:
        return datetime.strptime(str(value), ESPO_DATETIME)
    except ValueError:
        raise RecordError(400, f"{name} {value!r} is not a datetime YYYY-MM-DD HH:mm:ss") from None


def _span(record: Record, kind: str) -> None:
    """EspoCRM's ``dateEnd`` (required, not before ``dateStart``) and ``duration`` (not stored:
    ``dateEnd - dateStart`` in seconds) of a call or meeting; a call's ``direction``."""
    start = _moment(record["dateStart"], "dateStart")
    if record["dateEnd"] is None:
        duration = record["duration"]
        if isinstance(duration, bool) or not isinstance(duration, int) or duration < 0:
            duration = DEFAULT_DURATION[kind]
        record["dateEnd"] = (start + timedelta(seconds=duration)).strftime(ESPO_DATETIME)
    end = _moment(record["dateEnd"], "dateEnd")
    if end < start:
        raise RecordError(400, "dateEnd must be after dateStart")
    record["duration"] = int((end - start).total_seconds())
    if kind == "calls":
        record["direction"] = record["direction"] or CALL_DIRECTIONS[0]
        if record["direction"] not in CALL_DIRECTIONS:
            raise RecordError(400, f"direction {record['direction']!r}; allowed: {CALL_DIRECTIONS}")


def add_activity(state: SandboxState, deal_id: str, kind: str, data: dict[str, Any]) -> Record:
    """Link an e-mail, call or meeting (``kind``) to a deal; missing fields get defaults."""
    if deal_id not in state.deals:
        raise RecordError(404, f"no deal {deal_id}")
    now = state.clock.espo()
    record: Record = dict.fromkeys(LINK_ATTRIBUTES[kind])
    record.update({"createdAt": now, "modifiedAt": now, "parentType": "Opportunity"})
    if kind == "emails":
        record.update({"dateSent": now, "status": "Archived", "isHtml": False, "to": ""})
    else:
        record.update({"dateStart": now, "status": "Held"})
    record.update({k: v for k, v in data.items() if k in LINK_ATTRIBUTES[kind]})
    if kind != "emails":
        _span(record, kind)
    record["id"] = str(data.get("id") or state.new_id())  # EspoCRM ids are strings
    record["parentId"] = deal_id
    if kind == "emails":
        record["subject"] = record["subject"] or record["name"] or "(no subject)"
        record["name"] = record["name"] or record["subject"]
        record["bodyPlain"] = record["bodyPlain"] or record["body"]
    else:
        record["name"] = record["name"] or kind[:-1].title()
    state.activity(deal_id, kind).append(record)
    return record


def create_deal(state: SandboxState, data: dict[str, Any], *, webhooks: bool = True) -> Record:
    """Create a deal (and its nested ``emails``, ``calls``, ``meetings``); emit ``create``."""
    record = _deal_record(state, data)
    if record["id"] in state.deals:
        raise RecordError(409, f"deal {record['id']} exists")
    state.deals[record["id"]] = record
    for kind in ACTIVITY_KINDS:
        for item in data.get(kind) or []:
            add_activity(state, record["id"], kind, item)
    if webhooks:
        state.webhooks.enqueue("Opportunity.create", dict(record))
    return record


#: EspoCRM's default probability of each stage, set when a deal moves.
STAGE_PROBABILITY = {
    "Prospecting": 10,
    "Qualification": 20,
    "Proposal": 50,
    "Negotiation": 80,
    "Closed Won": 100,
    "Closed Lost": 0,
}


def _last_stage(before: str, stage: str, last: str | None) -> str | None:
    """EspoCRM's ``processLastStage``: the stage itself while the deal is open or won; a lost
    deal keeps its last stage, except Won → Lost, which takes the open stage of the highest
    probability."""
    if stage != "Closed Lost":
        return stage
    if before == "Closed Won":
        open_stages = [s for s in STAGE_PROBABILITY if not s.startswith("Closed ")]
        return max(open_stages, key=lambda s: STAGE_PROBABILITY[s])
    return last


def update_deal(state: SandboxState, deal_id: str, changes: dict[str, Any]) -> Record:
    """Change a deal's attributes; emit ``update`` and, for a new stage, ``fieldUpdate.stage``."""
    deal = state.deals.get(deal_id)
    if deal is None:
        raise RecordError(404, f"no deal {deal_id}")
    stage = changes.get("stage", deal["stage"])
    if stage not in state.config.espocrm_stages:
        raise RecordError(400, f"unknown stage {stage!r}; allowed: {state.config.espocrm_stages}")
    changed = {
        k: v
        for k, v in changes.items()
        if k in OPPORTUNITY_ATTRIBUTES and k not in ("id", "createdAt") and deal.get(k) != v
    }
    if not changed:
        return deal
    before = deal["stage"]
    deal.update(changed)
    deal["modifiedAt"] = state.clock.espo()
    if "stage" in changed:
        # EspoCRM's side effects of a stage change travel with the update (no modifiedAt does):
        # the stage's probability when it changes, and lastStage as processLastStage sets it.
        probability = STAGE_PROBABILITY.get(stage, deal.get("probability"))
        if probability != deal.get("probability"):
            changed["probability"] = deal["probability"] = probability
        last = _last_stage(before, stage, deal.get("lastStage"))
        if last != deal.get("lastStage"):
            changed["lastStage"] = deal["lastStage"] = last
        state.webhooks.enqueue("Opportunity.fieldUpdate.stage", {"id": deal_id, "stage": stage})
    state.webhooks.enqueue("Opportunity.update", {"id": deal_id, **changed})
    return deal


def delete_deal(state: SandboxState, deal_id: str) -> None:
    """Delete a deal and its activity; emit ``delete``."""
    if state.deals.pop(deal_id, None) is None:
        raise RecordError(404, f"no deal {deal_id}")
    state.activities.pop(deal_id, None)
    state.webhooks.enqueue("Opportunity.delete", {"id": deal_id})


def backfill(state: SandboxState) -> None:
    """Give a world kept by an older sandbox what every record has now: a deal's ``closeDate``,
    a call's or meeting's ``dateEnd`` (and a call's ``direction``). A record that cannot be
    completed is left as it is."""
    for deal in state.deals.values():
        if deal.get("closeDate") is None:
            try:
                created = _moment(deal.get("createdAt"), "createdAt")
            except RecordError:
                created = state.clock.now()
            deal["closeDate"] = (created + timedelta(days=CLOSE_AFTER_DAYS)).strftime("%Y-%m-%d")
    for links in state.activities.values():
        for kind in ("calls", "meetings"):
            for record in links.get(kind, []):
                record.update({k: record.get(k) for k in LINK_ATTRIBUTES[kind]})
                try:
                    _span(record, kind)
                except RecordError:
                    continue
