"""The rules that open, close and supersede a deal's watch, stated once.

Every path that changes which deals are watched decides here: ``register`` (a webhook's items,
one event as a list of N, an item alone as a list of one), the reconciliation of ``evaluate``
(the CRM's listing of deals) and the re-check of a deal before its step fires. The store applies
the decisions (``store/watches.py``, ``apply_registrations``).

The rules, for a deal observed in a stage (or gone) at a moment:
- A deal in a watched stage gets a watch, unless it has an open one (``already_open``).
- A deal in the won or lost stage, in another stage, or gone closes its open watch with that
  reason (``won``, ``lost``, ``out_of_scope``, ``subject_gone``); with none open, nothing
  (``nothing_to_close``).
- An event is stale when something newer happened to the deal: a watch opened after it was
  received is not closed by it, and a watch closed after it was received is not reopened by it
  (both ``superseded``). A reading of the CRM (reconciliation, re-check) is current by
  definition and is never stale.
- A watch an operator opened (``registered_by`` ``operator``: a deal the stages would not catch)
  is kept while its deal is in any other stage (``kept_by_operator``); won, lost or gone close it
  as any watch.
- ``unwatched`` (an operator's decision) is final for that stage like ``exhausted``: no new watch
  while the deal stays in the stage it was unwatched in (``not_reopened_unwatched``).
- ``exhausted`` is final for that stage: a deal whose latest watch closed ``exhausted`` gets no
  new watch while it is in the stage it was exhausted in (``not_reopened_exhausted``), and a new
  one once it is seen in another watched stage (it moved on). The rule is the same whoever sees
  the deal (a webhook, the reconciliation), since both compare the deal's stage (the CRM's,
  whenever it was read) with the stage the watch ended in.
"""

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

from followup_pipeline.domain.decisions import Close, CloseReason, StagePolicy, decide_for_stage

#: Where an observation comes from: an event of the CRM, or a reading of the CRM itself.
Source = Literal["webhook", "reconcile", "recheck"]
Action = Literal["open", "close", "none"]


class StageSettings(Protocol):
    """The configured stages (``Settings`` has them)."""

    @property
    def watched_stages(self) -> list[str]: ...

    @property
    def won_stage(self) -> str: ...

    @property
    def lost_stage(self) -> str: ...


def stage_policy(settings: StageSettings) -> StagePolicy:
    """The configured watched, won and lost stages."""
    return StagePolicy(settings.watched_stages, settings.won_stage, settings.lost_stage)


@dataclass(frozen=True)
class Subject:
    """What a watch copies from the CRM's deal."""

    subject_id: str
    name: str
    stage: str
    account_name: str | None = None
    assigned_user_id: str | None = None
    assigned_user_name: str | None = None
    crm_url: str | None = None
    amount: float | None = None
    amount_currency: str | None = None


class WatchState(Protocol):
    """The latest watch of a deal, open or closed, as far as the rules need it."""

    @property
    def id(self) -> int: ...

    @property
    def registered_at(self) -> datetime: ...

    @property
    def closed_at(self) -> datetime | None: ...

    @property
    def closed_reason(self) -> str | None: ...

    @property
    def stage(self) -> str: ...

    @property
    def registered_by(self) -> str: ...


@dataclass(frozen=True)
class Observation:
    """A deal seen in ``stage`` (None: gone) at ``at``, by ``source``."""

    subject_id: str
    stage: str | None
    at: datetime
    source: Source


@dataclass(frozen=True)
class Registration:
    """What to do with one deal's watch, and the outcome to report: ``open`` (reported as
    ``registered``, or ``already_open`` when another run opened one first), ``close`` the open
    watch ``watch_id`` for ``reason``, or ``none``."""

    subject_id: str
    action: Action
    outcome: str
    watch_id: int | None = None
    reason: CloseReason | None = None


def decide_one(
    observation: Observation, latest: WatchState | None, policy: StagePolicy
) -> Registration:
    """The registration of one observed deal whose latest watch is ``latest``."""
    subject, at = observation.subject_id, observation.at
    event = observation.source == "webhook"
    open_now = latest if latest is not None and latest.closed_at is None else None
    decision = decide_for_stage(observation.stage, policy)  # no stage: gone
    if isinstance(decision, Close):
        if open_now is None:
            return Registration(subject, "none", "nothing_to_close")
        if decision.reason == "out_of_scope" and open_now.registered_by == "operator":
            return Registration(subject, "none", "kept_by_operator", open_now.id)
        if event and open_now.registered_at > at:
            return Registration(subject, "none", "superseded", open_now.id)
        reason = decision.reason
        return Registration(subject, "close", f"closed_{reason}", open_now.id, reason)
    if open_now is not None:
        return Registration(subject, "none", "already_open")
    if latest is not None and latest.closed_at is not None:
        if event and latest.closed_at > at:
            return Registration(subject, "none", "superseded")
        if latest.closed_reason == "exhausted" and latest.stage == observation.stage:
            return Registration(subject, "none", "not_reopened_exhausted")
        if latest.closed_reason == "unwatched" and latest.stage == observation.stage:
            return Registration(subject, "none", "not_reopened_unwatched")
    return Registration(subject, "open", "registered")


def decide(
    observations: Sequence[Observation],
    latest: Mapping[str, WatchState],
    policy: StagePolicy,
) -> list[Registration]:
    """The registrations of distinct deals, each by ``decide_one`` with its latest watch."""
    seen: set[str] = set()
    for observation in observations:
        if observation.subject_id in seen:
            raise ValueError(f"deal {observation.subject_id} is observed twice in one list")
        seen.add(observation.subject_id)
    return [decide_one(o, latest.get(o.subject_id), policy) for o in observations]


def subjects_to_close(registrations: Collection[Registration]) -> dict[int, CloseReason]:
    """The watches to close, by id, with their reasons."""
    return {
        r.watch_id: r.reason
        for r in registrations
        if r.action == "close" and r.watch_id is not None and r.reason is not None
    }
