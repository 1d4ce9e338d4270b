"""The one list of work waiting for a person (docs/architecture.md §12), the engine's: every
pipeline's dead events, dead actions and invalid items, and the learning reminders' parked
actions, each with its owner and backup (the operations owner by default, a tenant's owner for
its items) and a state: open, acknowledged, closed with how.

- ``sync`` takes in what failed since (a failure after a replay opens its item again, as news)
  and closes what ended done or suppressed by any path (a later run, reconciliation, a replay).
  The alert checks run it every tick; the commands before they read; ``followup migrate`` once.
- ``acknowledge``, ``close`` and ``replay`` are a person's, one by one or in bulk by a
  ``Selection``, each audited with who and why; ``dry`` shows what they would touch.
- ``engine/late.py`` is the runs' door to the list for what is late (late means owned).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg

from followup_pipeline.domain.steps import step_of_key
from followup_pipeline.domain.work import (
    LATE_KINDS,
    NOBODY,
    ClosedHow,
    Selection,
    action_item_kind,
    action_pipeline,
    event_pipeline,
    tenant_of_key,
)
from followup_pipeline.settings import Settings
from followup_pipeline.store import audit, events, ledger, lms, steps
from followup_pipeline.store import work as store
from followup_pipeline.store.db import connect
from followup_pipeline.store.dead_letters import parse_name, requeue_events
from followup_pipeline.store.work import Found, Settled, WorkItem


@dataclass(frozen=True)
class Synced:
    """What a sync did: items made, items failed again, items closed."""

    new: int = 0
    again: int = 0
    closed: int = 0


def _owners(conn: psycopg.Connection[Any], settings: Settings) -> dict[str, tuple[str, str | None]]:
    """Each tenant's owner and backup, the operations' where the tenant names none."""
    return {
        t.id: (t.owner or settings.ops_owner or NOBODY, t.backup or settings.ops_backup)
        for t in lms.tenants(conn)
    }


def failures(conn: psycopg.Connection[Any], settings: Settings) -> list[Found]:
    """Everything that failed and waits, as the list takes it in: dead events, dead actions
    (an alert's own are left out: alerting never alerts about itself) and invalid items."""
    ops = (settings.ops_owner or NOBODY, settings.ops_backup)
    tenants = _owners(conn, settings)
    found: list[Found] = []
    for row in events.dead_events(conn):
        what = f"{row.source} {row.event_type or ''}".strip()
        found.append(
            Found(
                subject=f"event:{row.id}",
                pipeline=event_pipeline(row.source),
                kind="dead_event",
                what=what,
                reason=f"{row.attempts} attempts" if row.attempts else "dead on arrival",
                failed_at=row.processed_at or row.received_at,
                owner=ops[0],
                backup=ops[1],
                step=row.dead_step,
                error=row.last_error,
                event_id=row.id,
            )
        )
    for action in ledger.dead_actions(conn, max_attempts=settings.action_max_attempts):
        if action.kind in ("alert", "crm_lead"):
            continue  # alerting never alerts about itself; a CRM Lead write waits with its event
        tenant = tenant_of_key(action.idempotency_key)
        owner, backup = tenants.get(tenant, ops) if tenant else ops
        found.append(
            Found(
                subject=f"action:{action.idempotency_key}",
                pipeline=action_pipeline(action.kind, action.idempotency_key),
                kind=action_item_kind(action.kind),
                what=action.kind,
                reason=f"{action.attempts} attempts",
                failed_at=action.updated_at,
                owner=owner,
                backup=backup,
                tenant_id=tenant if tenant in tenants else None,
                error=action.last_error,
                action_key=action.idempotency_key,
            )
        )
    for item in events.invalid_items(conn):
        what = f"{item.source} {item.event_type or ''}".strip()
        step = item.key.split(":", 1)[1] if ":" in item.key else item.key
        found.append(
            Found(
                subject=f"event:{item.event_id}/{step}",
                pipeline=event_pipeline(item.source),
                kind="invalid_item",
                what=f"{what} (item skipped, the others applied)",
                reason=f"{item.attempts} attempts; invalid, it can never be done as it is",
                failed_at=item.completed_at,
                owner=ops[0],
                backup=ops[1],
                step=step,
                error=item.reason,
                event_id=item.event_id,
            )
        )
    return found


def _how(row: Settled) -> tuple[ClosedHow, str]:
    """How a settled item ended, and in words."""
    replayed = row.replays >= row.failures  # a person replayed it since its last failure
    if row.gone:
        return "resolved", "what it stood for is no longer on record (purged or erased)"
    if row.event_status == "done":
        return ("replayed", "done after a replay") if replayed else ("resolved", "done")
    if row.action_outcome == "suppressed":
        if row.action_reason == "expired":
            return "expired", "suppressed: expired"
        return "resolved", f"suppressed: {row.action_reason}"
    outcome = row.action_outcome or "done"
    return ("replayed", f"{outcome} after a replay") if replayed else ("resolved", outcome)


def sync(
    conn: psycopg.Connection[Any], settings: Settings, *, at: datetime, known: bool = False
) -> Synced:
    """Take in what failed since and close what ended since, under the list's lock. ``known``:
    the failures were alerted before the list existed (an upgrade): none alerts again."""
    new = again = closed = 0
    with conn.transaction():
        store.lock(conn)
        failed = failures(conn, settings)
        known_ones = store.known_failures(conn, [f.subject for f in failed])
        for item in failed:
            if (item.subject, item.failed_at) in known_ones:
                continue  # the list holds this very failure, waiting or closed
            made, failed_again = store.found(conn, item, at=at, known=known)
            new += made
            again += failed_again
        for row in store.settled(conn):
            how, note = _how(row)
            closed += len(store.close(conn, [row.id], how, at=at, note=note))
    return Synced(new, again, closed)


#: The migration that made the list: what failed before it was alerted the old way.
LIST_MIGRATION = 25


def after_migrate(url: str, settings: Settings, applied_versions: list[int]) -> Synced:
    """Bring what failed into the list after migrations; when the list was made just now (an
    upgrade), what it takes in was alerted before and does not alert again."""
    with connect(url, autocommit=True) as conn:
        known = LIST_MIGRATION in applied_versions
        return sync(conn, settings, at=datetime.now(UTC), known=known)


#: The most items one selection reads (a command says when it reached it).
SELECT_LIMIT = 10_000


def select(conn: psycopg.Connection[Any], selection: Selection, settings: Settings, *,
           at: datetime) -> list[WorkItem]:  # fmt: skip
    """The items ``selection`` names (at most ``SELECT_LIMIT``), after a sync (the list is
    current when a person reads); no transaction is left open on ``conn``."""
    sync(conn, settings, at=at)
    with conn.transaction():
        return store.select(conn, selection, limit=SELECT_LIMIT)


@dataclass(frozen=True)
class Done:
    """What a person's request did: the items it touched, and those it could not, with why."""

    touched: list[WorkItem] = field(default_factory=list)
    #: By the item's ``#number``, or the name given that named no waiting item.
    refused: dict[str, str] = field(default_factory=dict)
    #: Events put back to pending (a replay), for a run that registers them at once.
    requeued: list[int] = field(default_factory=list)
    #: Names replayed that stood for no waiting item (an ``unhandled`` event, a closed item's).
    by_name: list[str] = field(default_factory=list)


def acknowledge(
    conn: psycopg.Connection[Any],
    items: list[WorkItem],
    *,
    by: str,
    reason: str | None,
    at: datetime,
) -> Done:
    """A person has seen ``items`` and owns them: acknowledged, audited; alerts about them stop."""
    refused = {f"#{i.id}": f"not open (it is {i.state})" for i in items if i.state != "open"}
    wanted = [i for i in items if i.state == "open"]
    with conn.transaction():
        store.lock(conn)
        done = set(store.acknowledge(conn, [i.id for i in wanted], by=by, at=at))
        for item in wanted:
            if item.id in done:
                audit.record(conn, actor=by, action="work.acknowledge",
                             subject=f"work:{item.id} {item.subject}", reason=reason)  # fmt: skip
            else:
                refused[f"#{item.id}"] = "changed meanwhile; list it again"
    return Done([i for i in wanted if i.id in done], refused)


def close(
    conn: psycopg.Connection[Any],
    items: list[WorkItem],
    *,
    by: str,
    reason: str,
    at: datetime,
) -> Done:
    """A person decides ``items`` are done with: closed (``decided``), with their reason, audited.
    A dead action is suppressed in the ledger (``decided``) so that no run tries it again."""
    if not reason.strip():
        raise ValueError("closing needs a reason (--reason): it is kept in the audit")
    refused = {f"#{i.id}": "closed already" for i in items if not i.waiting}
    wanted = [i for i in items if i.waiting]
    closed: list[WorkItem] = []
    with conn.transaction():
        store.lock(conn)
        for item in wanted:
            if not store.close(conn, [item.id], "decided", at=at, by=by, note=reason):
                refused[f"#{item.id}"] = "changed meanwhile; list it again"
                continue
            if item.action_key is not None:
                ledger.decide(conn, item.action_key)
                if item.kind == "reminder":  # one parked before it was ever tried, too
                    lms.decide_reminder(conn, item.action_key, at=at)
                elif item.kind == "step":  # late: it and the open steps before it, decided
                    watch_id, step_no = step_of_key(item.action_key)
                    steps.skip_through(conn, watch_id=watch_id, step_no=step_no,
                                       reason="decided", at=at)  # fmt: skip
            audit.record(conn, actor=by, action="work.close",
                         subject=f"work:{item.id} {item.subject}", reason=reason)  # fmt: skip
            closed.append(item)
    return Done(closed, refused)


def _why_not_replayed(conn: psycopg.Connection[Any], item: WorkItem) -> str | None:
    """Why ``item`` cannot be replayed now; None when it can."""
    if not item.waiting:
        return "closed"
    if item.kind == "invalid_item":
        return "an invalid item can never be done as it is: fix its source, then close it"
    if item.event_id is not None:
        return None  # its event's own checks, in requeue_events
    if item.action_key is None:
        return "nothing to replay"
    action = ledger.action_by_key(conn, item.action_key)
    if action is None:
        if item.kind in LATE_KINDS:
            return f"nothing was tried yet: it waits for {item.reason}"
        return "its action is no longer on record"
    if action.kind == "crm_lead":
        return "a CRM Lead write is replayed with its event (event:<id>)"
    if action.outcome != "failed":
        return f"its action is {action.outcome}, not failed"
    return None


def why_not(conn: psycopg.Connection[Any], item: WorkItem, verb: str) -> str | None:
    """Why ``verb`` (ack, close, replay) would refuse ``item``; None when it would not."""
    if verb == "ack":
        return None if item.state == "open" else f"not open (it is {item.state})"
    if verb == "close":
        return None if item.waiting else "closed already"
    return _why_not_replayed(conn, item)


def _replay_name(conn: psycopg.Connection[Any], name: str) -> tuple[int | None, str | None]:
    """Replay a name that stands for no waiting item (an ``unhandled`` event whose source has a
    handler now, an item a person closed, a failed action with attempts left): the event
    requeued (its id) or the action given a fresh budget; else why not."""
    try:
        parsed = parse_name(name)
    except ValueError as error:
        return None, str(error)
    if parsed.kind == "event":
        done, refusals = requeue_events(conn, [parsed.event_id])
        return (done[0], None) if done else (None, refusals[parsed.event_id])
    action = ledger.action_by_key(conn, parsed.value)
    if action is None:
        return None, "no such waiting item, and no such action"
    if action.kind == "crm_lead":
        return None, "a CRM Lead write is replayed with its event (event:<id>)"
    if action.outcome != "failed":
        return None, f"not a dead letter (outcome {action.outcome})"
    if not ledger.replay_action(conn, parsed.value):
        return None, "changed while replaying; try again"
    return None, None


def replay(
    conn: psycopg.Connection[Any],
    items: list[WorkItem],
    *,
    by: str,
    reason: str | None,
    at: datetime,
    names: tuple[str, ...] = (),
) -> Done:
    """Replay ``items`` under their original ids: a dead event back to pending (the next
    ``register`` run, or this ``replay`` run, takes it, skipping the steps it finished), a dead
    action a fresh budget of attempts (its run searches the provider first). Audited; the item
    stays until what it stands for ends (then it closes as replayed) or fails again (news).
    ``names`` the person gave that stand for no waiting item are replayed by name as before the
    list (an ``unhandled`` event, a closed item's event), or refused with why."""
    refused: dict[str, str] = {}
    touched: list[WorkItem] = []
    requeued: list[int] = []
    by_name: list[str] = []
    with conn.transaction():
        store.lock(conn)
        for item in items:
            why = _why_not_replayed(conn, item)
            if why is None and item.event_id is not None:
                done, refusals = requeue_events(conn, [item.event_id])
                why = refusals.get(item.event_id)
                requeued += done
            elif why is None and item.action_key is not None:
                why = None if ledger.replay_action(conn, item.action_key) else "changed meanwhile"
            if why is not None:
                refused[f"#{item.id}"] = why
                continue
            store.replayed(conn, [item.id], by=by, at=at)
            audit.record(conn, actor=by, action="work.replay",
                         subject=f"work:{item.id} {item.subject}", reason=reason)  # fmt: skip
            touched.append(item)
        for name in names:
            if any(item.subject == name for item in items):
                continue
            event_id, why = _replay_name(conn, name)
            if why is not None:
                refused[name] = why
                continue
            requeued += [event_id] if event_id is not None else []
            by_name.append(name)
            audit.record(conn, actor=by, action="work.replay", subject=name, reason=reason)
    return Done(touched, refused, requeued, by_name)
