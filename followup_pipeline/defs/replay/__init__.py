"""Replay: re-process items of the list of work waiting for a person under their original ids.

Launched from the Launchpad with ``ops: {replay_dead_letters: {config: {...}}}``: ``names``
(``event:<id>``, ``action:<key>``) or ``items`` (their numbers), or the filters of ``followup
work`` (``pipeline``, ``kinds``, ``step``, ``error``, ``owner``, ``since``, ``tenant``,
``subject``; ``all`` for every waiting item). ``dry`` lists what they select in the run's log
and changes nothing. Each dead event goes back to pending under its original id and is
registered in this run, so the items it finished before are skipped. Each dead action gets a
fresh budget of attempts and is carried out by its pipeline's next run, which searches the
provider for its key before any create.

The events are handled by their source's handler, found in the ``event_handlers`` resource (each
capability that consumes events offers its own), so this capability imports none of them.
"""

from datetime import datetime

import dagster as dg
from pydantic import Field

from followup_pipeline.domain.work import Selection, parse_since
from followup_pipeline.engine import work
from followup_pipeline.engine.runs import RunCounts, outcome_output, time_limit
from followup_pipeline.engine.scope import RunScope
from followup_pipeline.engine.worker import EventHandlers, EventWorker, WorkerRun, worker_outcome
from followup_pipeline.integrations.resources import (
    CompanyLookupResource,
    EspoCrmResource,
    MistralResource,
)
from followup_pipeline.resources import ClockResource, PostgresResource
from followup_pipeline.settings import Settings
from followup_pipeline.store.dead_letters import parse_name


class ReplayConfig(dg.Config):
    """What to replay: names, item numbers or filters (every one set narrows the selection)."""

    names: list[str] = Field(default_factory=list)
    items: list[int] = Field(default_factory=list)
    pipeline: str | None = None
    kinds: list[str] = Field(default_factory=list)
    step: str | None = None
    error: str | None = None
    owner: str | None = None
    #: today, yesterday, 6h, 2d or 2026-12-03T08:00 (the machine's zone unless it says).
    since: str | None = None
    tenant: str | None = None
    subject: str | None = None
    #: Every waiting item, unfiltered (needed when nothing else narrows it).
    all: bool = False
    #: List what the selection names in the run's log; change nothing.
    dry: bool = False
    #: Who replays (kept in the audit): the Launchpad has no login of its own to tell.
    by: str = "the Dagster UI"
    reason: str | None = None

    def selection(self, zone: str, now: datetime) -> Selection:
        """The selection, ``ValueError`` naming a malformed part."""
        for name in self.names:
            parse_name(name)
        return Selection(
            ids=tuple(self.items),
            names=tuple(n.strip() for n in self.names),
            pipeline=self.pipeline,
            kinds=tuple(self.kinds),
            step=self.step,
            error=self.error,
            owner=self.owner,
            since=parse_since(self.since, zone=zone, now=now) if self.since else None,
            tenant=self.tenant,
            subject=self.subject,
        )


@dg.op
def replay_dead_letters(
    context: dg.OpExecutionContext,
    config: ReplayConfig,
    settings: dg.ResourceParam[Settings],
    event_handlers: dg.ResourceParam[EventHandlers],
    postgres: PostgresResource,
    espocrm: EspoCrmResource,
    company_lookup: CompanyLookupResource,
    mistral: MistralResource,
    clock: ClockResource,
) -> dg.Output[RunCounts]:
    """Replay what the selection names; register the replayed events now."""
    now = clock.now()
    try:
        selection = config.selection(settings.timezone, now)
    except ValueError as error:
        raise dg.Failure(description=str(error)) from None
    if not selection.is_narrowed() and not config.all:
        raise dg.Failure(
            description="name items (names, items) or narrow with a filter; all: true for "
            "every waiting item"
        )
    by = config.by.strip() or "the Dagster UI"
    with postgres.connection() as conn:
        chosen = work.select(conn, selection, settings, at=now)
        context.log.info("%s item(s) selected (%s)", len(chosen), selection.describe())
        missing = [f"#{n}" for n in selection.ids if n not in {i.id for i in chosen}]
        by_name = tuple(n for n in selection.names if n not in {i.subject for i in chosen})
        for item in chosen:
            why = work.why_not(conn, item, "replay")
            refusal = f" (would be refused: {why})" if why else ""
            context.log.info("#%s %s %s: %s%s", item.id, item.kind, item.subject, item.what,
                             refusal)  # fmt: skip
        if config.dry:
            for label in [*missing, *by_name]:
                context.log.info("%s: no such waiting item", label)
            return outcome_output(context, "ok", {"selected": len(chosen), "dry": 1})
        done = work.replay(conn, chosen, by=by, reason=config.reason, at=now, names=by_name)
        for label in missing:
            done.refused[label] = "no such waiting item"
        for label, why in done.refused.items():
            context.log.warning("%s not replayed: %s", label, why)
        conn.commit()  # the replay is on record, and the worker wants no transaction open
        vendors = {
            "espocrm": espocrm,
            "company_lookup": company_lookup,
            "mistral": mistral,
            "clock": clock,
        }
        scope = RunScope(now, context.run_id, context.log)
        handler = event_handlers.dispatcher(WorkerRun(conn, postgres, scope, settings, vendors))
        worker = EventWorker(conn, handler, settings, sources=())
        counts: RunCounts = dict(worker.run(ids=done.requeued))
        work.sync(conn, settings, at=clock.now())
    replayed_events = sum(1 for i in done.touched if i.event_id is not None)
    replayed_names = sum(1 for n in done.by_name if n.startswith("action:"))
    counts.update(
        selected=len(chosen),
        requeued=len(done.requeued),
        actions_replayed=len(done.touched) - replayed_events + replayed_names,
        refused=len(done.refused),
    )
    if not chosen and not done.by_name:
        context.log.warning("nothing to replay (%s)", selection.describe())
    outcome = "partial" if done.refused else worker_outcome(counts)
    return outcome_output(context, outcome, counts)


@dg.job(
    description=(
        "Re-process items of the work list (dead events, dead actions) by their original id."
    ),
    tags=time_limit(30 * 60),
)
def replay() -> None:
    replay_dead_letters()


def build_defs(settings: Settings) -> dg.Definitions:
    """The ``replay`` job, launched by an operator."""
    return dg.Definitions(jobs=[replay], resources={"settings": settings})
