"""The two report ops, made by one factory: gather the partition's data, render it, send it once.

Each mail is sent once per partition: its send is the ledger action ``report:{kind}:{partition}``
(the team's) or ``report:morning:{partition}:to:{CRM user id}`` (a salesperson's own morning list;
``engine/mailer.py``). A morning list with nothing due or overdue is not sent: recorded
``suppressed``, reason ``nothing_due``. A rerun, a run retry or a second backfill
sends nothing; run config ``force: true`` sends again under ``report:{kind}:{partition}#{n}``.
A run launched without a partition (``followup dagster job execute -j morning_report``) sends the
current window (``window.py``) under that window's key: the same once-per-window rule.
"""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Generic, TypeVar

import dagster as dg
import psycopg

from followup_pipeline.defs.report.gather import crm_reading, morning_data, weekly_data
from followup_pipeline.defs.report.window import Kind, current_window
from followup_pipeline.domain.reports import (
    Language,
    MorningData,
    Rendered,
    WeeklyData,
    has_work,
    personal,
    render_morning,
    render_weekly,
)
from followup_pipeline.engine.effects import SuppressReason
from followup_pipeline.engine.mailer import Mailer, MailError, MailResult
from followup_pipeline.engine.runs import RunCounts, outcome_output, skipped_output
from followup_pipeline.engine.scope import RunScope
from followup_pipeline.integrations.resources import OutlookResource
from followup_pipeline.resources import ClockResource, PostgresResource
from followup_pipeline.settings import Settings
from followup_pipeline.store import reports as store

Data = TypeVar("Data")


class ReportConfig(dg.Config):
    """``force``: send the partition's report again, though it went out already."""

    force: bool = False


@dataclass(frozen=True)
class Letter(Generic[Data]):
    """One mail of a report run: to whom, under which key (``report:{kind}:{window}`` and the
    ``suffix``), what it shows, and why it is not sent (None: it is)."""

    suffix: str
    to: list[str]
    data: Data
    skip: SuppressReason | None = None
    #: Its reader's language (None: the team's, ``report_language``).
    language: Language | None = None


@dataclass(frozen=True)
class Report(Generic[Data]):
    """One kind of report: how its data is gathered, who gets which mail, how each is
    rendered and counted."""

    kind: Kind
    op_name: str
    description: str
    gather: Callable[[psycopg.Connection[Any], Settings, date, datetime, dg.DagsterInstance], Data]
    letters: Callable[[Data, Settings], list[Letter[Data]]]
    render: Callable[[Data, Language], Rendered]
    counts: Callable[[Data], dict[str, int]]


def morning_letters(data: MorningData, settings: Settings) -> list[Letter[MorningData]]:
    """The team's list to the report recipients, and each mapped salesperson's own list to
    them; a list with nothing due or overdue is not sent (recorded ``nothing_due``)."""
    letters: list[Letter[MorningData]] = []
    if settings.report_recipients:
        skip: SuppressReason | None = None if has_work(data) else "nothing_due"
        letters.append(Letter("", settings.report_recipients, data, skip))
    names = {s.owner_id: s.owner for s in data.steps if s.owner_id and s.owner}
    for user_id, address in sorted(settings.salesperson_addresses.items()):
        mine = personal(data, user_id, names.get(user_id) or "")
        idle: SuppressReason | None = None if has_work(mine) else "nothing_due"
        language = settings.salesperson_languages.get(user_id)
        letters.append(Letter(f"to:{user_id}", [address], mine, idle, language))
    return letters


MORNING = Report[MorningData](
    kind="morning",
    op_name="send_morning_list",
    description=(
        "Render the partition's morning lists (the team's, and each salesperson's own) and send "
        "each once (again with ``force``); a list with nothing due is not sent."
    ),
    gather=lambda conn, settings, day, now, instance: morning_data(
        conn, settings, day, now, crm_reading(instance)
    ),
    letters=morning_letters,
    render=render_morning,
    counts=lambda data: {
        "due_today": len(data.due_today),
        "overdue": len(data.overdue),
        "summaries": len(data.summaries),
        "closed": len(data.closed),
        "late": int(data.late),
    },
)
WEEKLY = Report[WeeklyData](
    kind="weekly",
    op_name="send_weekly_overview",
    description="Render the week's overview (the partition's Friday) and send it once.",
    gather=weekly_data,
    letters=lambda data, settings: (
        [Letter("", settings.report_recipients, data)] if settings.report_recipients else []
    ),
    render=render_weekly,
    counts=lambda data: {
        "fired": data.fired,
        "opened": data.opened,
        "failed_runs": data.failed_runs,
        "leads_in": data.leads.total if data.leads else 0,
        "new_people": data.leads.new_people if data.leads else 0,
    },
)


def send(
    context: dg.OpExecutionContext,
    config: ReportConfig,
    settings: Settings,
    mailer: Mailer,
    *,
    base: str,
    to: list[str],
    rendered: Rendered,
) -> MailResult:
    """Send a rendered report once per key (again under ``key#n`` with ``force``)."""
    # A run and its retries share their root run id: a retried forced run reuses its key.
    root = context.run.tags.get("dagster/root_run_id") or context.run_id
    with mailer.db.connection() as conn:
        keys = store.report_keys(conn, base)
    sent = any(k.key == base and k.outcome in ("accepted", "confirmed") for k in keys)
    key = base
    if config.force and sent:
        forced = [k for k in keys if k.key != base]
        mine = next((k.key for k in forced if k.root_run_id == root), None)
        key = mine or f"{base}#{len(forced) + 1}"
    try:
        result = mailer.send_once(
            key=key,
            kind="report",
            to=to,
            subject=rendered.subject,
            html=rendered.html,
            text=rendered.text,
            # What the next report's "since" is: up to when this one read the data.
            payload={"until": mailer.run.now.isoformat(), "root_run_id": root},
        )
    except MailError as error:
        raise dg.Failure(description=str(error)) from error
    if result.outcome == "in_flight":
        # The last send may still be on its way: neither sent nor known unsent. The run
        # fails, so the partition shows it; a rerun after the window settles it.
        raise dg.Failure(
            description=(
                f"{key}: the last send may still be on its way; run again after "
                f"{settings.in_flight_s():.0f} s (the partition is not known to be sent)"
            )
        )
    return result


def report_op(report: Report[Data]) -> dg.OpDefinition:
    """The op that sends ``report``'s mails for its partition."""

    @dg.op(name=report.op_name, description=report.description)
    def send_report(
        context: dg.OpExecutionContext,
        config: ReportConfig,
        settings: dg.ResourceParam[Settings],
        postgres: PostgresResource,
        outlook: OutlookResource,
        clock: ClockResource,
    ) -> dg.Output[RunCounts]:
        if not settings.report_recipients and not (
            report.kind == "morning" and settings.salesperson_addresses
        ):
            reason = "FOLLOWUP_REPORT_RECIPIENTS is empty: nobody to send the report to"
            context.log.warning("skipped: %s", reason)
            return skipped_output(context, reason)
        run = RunScope(clock.now(), context.run_id, context.log)
        if context.has_partition_key:
            partition = context.partition_key
        else:
            # Launched without a partition: the current window, not a failure.
            partition = current_window(report.kind, run.now, settings.timezone)
            context.log.info("no partition given: sending the current window %s", partition)
        day = date.fromisoformat(partition)
        with postgres.connection() as conn:
            data = report.gather(conn, settings, day, run.now, context.instance)
        mailer = Mailer(run, postgres, outlook.get_client(), settings)
        tally: dict[str, int] = {}
        keys: list[str] = []
        request_ids: list[str] = []
        for letter in report.letters(data, settings):
            base = f"report:{report.kind}:{partition}" + (
                f":{letter.suffix}" if letter.suffix else ""
            )
            if letter.skip is not None:
                if mailer.skip(key=base, kind="report", reason=letter.skip):
                    context.log.info("%s: not sent (%s)", base, letter.skip)
                else:
                    # Sent, or maybe sent (an answer lost): the record stays as it is, for a
                    # later run of the window to settle against Sent Items.
                    context.log.info("%s: nothing due now; its earlier send is left", base)
                tally[f"skipped_{letter.skip}"] = tally.get(f"skipped_{letter.skip}", 0) + 1
                continue
            rendered = report.render(letter.data, letter.language or settings.report_language)
            result = send(
                context, config, settings, mailer, base=base, to=letter.to, rendered=rendered
            )
            tally[result.outcome] = tally.get(result.outcome, 0) + 1
            keys.append(result.key)
            request_ids += [result.request_id] if result.request_id else []
        counts = {
            **tally,
            "key": ", ".join(keys),
            "request_id": ", ".join(request_ids),
            **report.counts(data),
        }
        return outcome_output(context, "ok", counts)

    return send_report


send_morning_list = report_op(MORNING)
send_weekly_overview = report_op(WEEKLY)
