"""The words of the one list of work waiting for a person (docs/architecture.md §12): which
pipeline an event or an action belongs to, the kinds and states of an item, and the filter an
operator selects items with (``followup work``, the ``replay`` job)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal, get_args
from zoneinfo import ZoneInfo

Pipeline = Literal["deal_followup", "lead_intake", "learning", "operations"]
ItemKind = Literal[
    "dead_event", "dead_action", "invalid_item", "reminder", "certificate", "publication", "step"
]
State = Literal["open", "acknowledged", "closed"]
ClosedHow = Literal["replayed", "resolved", "decided", "expired"]

PIPELINES: tuple[str, ...] = get_args(Pipeline)
ITEM_KINDS: tuple[str, ...] = get_args(ItemKind)
STATES: tuple[str, ...] = get_args(State)
#: The kinds ``followup dead-letters`` shows: what failed every attempt or was skipped as invalid.
DEAD_LETTER_KINDS: tuple[ItemKind, ...] = ("dead_event", "dead_action", "invalid_item")
#: The learning reminders' own kinds (``followup lms queue``).
CATCH_UP_KINDS: tuple[ItemKind, ...] = ("reminder", "certificate", "publication")
#: Actions parked late, their vendor away (late means owned): the learning ones and a deal's
#: follow-up step. Nothing was tried yet for some; each closes by itself once it ends.
LATE_KINDS: tuple[ItemKind, ...] = (*CATCH_UP_KINDS, "step")
#: States an item waits in: it alerts, it counts, it can be replayed.
WAITING: tuple[State, ...] = ("open", "acknowledged")

#: Each event source's pipeline; a source without a handler is the operations' own.
EVENT_PIPELINES: dict[str, Pipeline] = {
    "espocrm": "deal_followup",
    "site-form": "lead_intake",
    "payment": "lead_intake",
    "crm-changes": "lead_intake",
}
#: The learning reminders' action keys (``lms:``, ``lms-cert:``, ``lms-publish:``), by prefix.
LEARNING_PREFIXES = ("lms:", "lms-cert:", "lms-publish:")
#: Who owns an item when nobody is named (the alert says to name one).
NOBODY = "nobody: set FOLLOWUP_OPS_OWNER"


def event_pipeline(source: str) -> Pipeline:
    """The pipeline of an event of ``source``."""
    return EVENT_PIPELINES.get(source, "operations")


def action_pipeline(kind: str, key: str) -> Pipeline:
    """The pipeline of a ledger action of ``kind`` under ``key``."""
    if key.startswith(LEARNING_PREFIXES) or kind in CATCH_UP_KINDS:
        return "learning"
    if kind == "crm_lead":
        return "lead_intake"
    if kind == "alert":
        return "operations"
    return "deal_followup"


def action_item_kind(kind: str) -> ItemKind:
    """The item a dead action of ``kind`` is: a learning action is its own kind."""
    for own in CATCH_UP_KINDS:
        if kind == own:
            return own
    return "dead_action"


def tenant_of_key(key: str) -> str | None:
    """The tenant a learning action's key names (``lms:<tenant>:…``, ``lms:weekly:<tenant>:…``,
    ``lms-cert:<tenant>:…``, ``lms-publish:<tenant>:…``); None for any other key."""
    if not key.startswith(LEARNING_PREFIXES):
        return None
    parts = key.split(":")
    if len(parts) > 2 and parts[0] == "lms" and parts[1] == "weekly":
        return parts[2] or None
    return parts[1] or None if len(parts) > 1 else None


_DURATION = re.compile(r"^(\d+)\s*([mhd])$")


def parse_since(text: str, *, zone: str, now: datetime) -> datetime:
    """``today`` (local midnight), ``yesterday``, ``30m``, ``6h``, ``2d``, or a date or a date and
    time (``2026-12-03``, ``2026-12-03T08:00``, local unless it names its offset);
    ``ValueError`` naming the forms otherwise."""
    local = now.astimezone(ZoneInfo(zone))
    word = text.strip().lower()
    if word in ("today", "yesterday"):
        midnight = local.replace(hour=0, minute=0, second=0, microsecond=0)
        return midnight - timedelta(days=1) if word == "yesterday" else midnight
    match = _DURATION.match(word)
    if match:
        unit = {"m": "minutes", "h": "hours", "d": "days"}[match[2]]
        return now - timedelta(**{unit: int(match[1])})
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"since {text!r}: expected today, yesterday, 6h, 2d or 2026-12-03T08:00"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=ZoneInfo(zone))


def _choice(value: str | None, allowed: tuple[str, ...], name: str) -> None:
    if value is not None and value not in allowed:
        raise ValueError(f"{name} {value!r} is not one of: {', '.join(allowed)}")


@dataclass(frozen=True)
class Selection:
    """What an operator selects items by; every field set narrows it. ``ids`` names items; with
    no state given, the waiting ones (open and acknowledged) are selected."""

    ids: tuple[int, ...] = ()
    #: What the items stand for, exactly (``event:12``, ``action:<key>``).
    names: tuple[str, ...] = ()
    pipeline: str | None = None
    kinds: tuple[str, ...] = ()
    step: str | None = None
    #: Part of the last error, any case.
    error: str | None = None
    owner: str | None = None
    states: tuple[str, ...] = field(default=WAITING)
    since: datetime | None = None
    tenant: str | None = None
    #: Part of the subject (``event:12``, ``action:lms:``), any case.
    subject: str | None = None

    def __post_init__(self) -> None:
        _choice(self.pipeline, PIPELINES, "pipeline")
        for kind in self.kinds:
            _choice(kind, ITEM_KINDS, "kind")
        for state in self.states:
            _choice(state, STATES, "state")
        if not self.states:
            raise ValueError("a selection needs at least one state")

    def is_narrowed(self) -> bool:
        """Whether anything but the state narrows it (a bulk action on the whole list asks
        for ``--all``)."""
        return bool(
            self.ids
            or self.names
            or self.pipeline
            or self.kinds
            or self.step
            or self.error
            or self.owner
            or self.since
            or self.tenant
            or self.subject
        )

    def describe(self) -> str:
        """The selection in words, for the audit and the console."""
        parts = [f"state {'/'.join(self.states)}"]
        if self.ids:
            parts.append("items " + ", ".join(f"#{i}" for i in self.ids))
        if self.names:
            parts.append(", ".join(self.names))
        for name, value in (
            ("pipeline", self.pipeline),
            ("step", self.step),
            ("error containing", self.error),
            ("owner", self.owner),
            ("tenant", self.tenant),
            ("subject containing", self.subject),
        ):
            if value:
                parts.append(f"{name} {value!r}")
        if self.kinds:
            parts.append(f"kind {'/'.join(self.kinds)}")
        if self.since:
            parts.append(f"since {self.since.isoformat(timespec='minutes')}")
        return ", ".join(parts)
