"""``followup report preview morning|weekly [--date D] [--lang de|en] [--html FILE]``: render a
report from the machine's data without sending it (and without recording anything).

``followup report send morning|weekly [--date D] [--force]``: send a report's window from a
shell, as its job does (in this process, on the machine's Dagster instance): the current window
by default, the window ``D`` falls in with ``--date``. Once per window, through the ledger key
``report:{kind}:{window}``: a second send sends nothing unless ``--force``. It prints one line,
what was sent (or why nothing was): Dagster's own log of the run is kept to its errors
(``QUIET_LOGS``), and stays in the run's history in the UI.
"""

from __future__ import annotations

import argparse
import contextlib
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from followup_pipeline.clock import build_clock
from followup_pipeline.commands import in_environment
from followup_pipeline.domain.localtime import local_date
from followup_pipeline.domain.reports import Language, personal, render_morning, render_weekly
from followup_pipeline.machine import NoInstance, open_instance, with_sandbox
from followup_pipeline.settings import Settings, secret_environment
from followup_pipeline.store.db import connect, resolve_database_url

#: ``report send``'s run logs only errors to the terminal (Dagster's console logger says every
#: step at DEBUG otherwise); the command prints the outcome itself.
QUIET_LOGS: dict[str, Any] = {"console": {"config": {"log_level": "ERROR"}}}


def _preview(args: argparse.Namespace, settings: Settings) -> int:
    # Imported here: the report module loads Dagster, which the other commands do not need.
    from followup_pipeline.defs.report.gather import crm_reading, morning_data, weekly_data

    now = build_clock(settings.now).now()
    today = local_date(now, settings.timezone)
    day: date = args.date or today
    # A salesperson's list in the language they are sent it in (FOLLOWUP_SALESPERSON_LANGUAGES).
    own = settings.salesperson_languages.get(args.person) if args.person else None
    language: Language = args.lang or own or settings.report_language
    url = resolve_database_url(settings)
    with contextlib.ExitStack() as stack:
        try:
            instance = stack.enter_context(open_instance(settings))
        except NoInstance as error:
            print(f"(Dagster's runs not read: {error})")
            instance = None
        with connect(url, autocommit=True) as conn:
            if args.kind == "morning":
                data = morning_data(conn, settings, day, now, crm_reading(instance), preview=True)
                if args.person is not None:  # a salesperson's own list, as they would get it
                    names = {s.owner_id: s.owner for s in data.steps if s.owner_id}
                    data = personal(data, args.person, names.get(args.person) or "")
                rendered = render_morning(data, language)
            else:
                # The week in progress (its Friday ahead) on a weekday; the week just ended on a
                # weekend.
                friday = day + timedelta(days=4 - day.weekday())
                if day.weekday() > 4:
                    friday -= timedelta(days=7)
                rendered = render_weekly(
                    weekly_data(conn, settings, friday, now, instance, preview=True), language
                )
    print(f"Subject: {rendered.subject}\n")
    print(rendered.text)
    if args.html is not None:
        args.html.write_text(rendered.html, encoding="utf-8")
        print(f"(HTML written to {args.html})")
    return 0


def _send(args: argparse.Namespace, settings: Settings) -> int:
    # Imported here: the report module loads Dagster, which the other commands do not need.
    import dagster as dg

    from followup_pipeline.defs import build_definitions
    from followup_pipeline.defs.report.window import current_window, window_of

    url = resolve_database_url(settings)
    settings = with_sandbox(settings)
    if args.date is not None:
        window = f"{window_of(args.kind, args.date):%Y-%m-%d}"
    else:
        window = current_window(args.kind, build_clock(settings.now).now(), settings.timezone)
    job, op = {
        "morning": ("morning_report", "send_morning_list"),
        "weekly": ("weekly_report", "send_weekly_overview"),
    }[args.kind]
    note = ""  # said after the outcome, on its line
    with contextlib.ExitStack() as stack:
        try:
            instance = stack.enter_context(open_instance(settings))
        except NoInstance as error:
            note = f" (the run is not recorded in Dagster: {error})"
            instance = stack.enter_context(dg.DagsterInstance.ephemeral())
        stack.enter_context(
            in_environment({**secret_environment(settings), "FOLLOWUP_DATABASE_URL": url})
        )
        try:
            result = (
                build_definitions(settings)
                .resolve_job_def(job)
                .execute_in_process(
                    instance=instance,
                    partition_key=window,
                    run_config={
                        "ops": {op: {"config": {"force": args.force}}},
                        "loggers": QUIET_LOGS,
                    },
                    tags={"followup/trigger": "report send"},
                    raise_on_error=False,
                )
            )
        except dg.DagsterError as error:  # e.g. a window Dagster does not have yet
            print(f"{job} {window}: not sent: {' '.join(str(error).split())}{note}")
            return 1
    status, said = _outcome(result, op)
    print(f"{job} {window}: {said}{note}")
    return status


def _outcome(result: Any, op: str) -> tuple[int, str]:
    """The exit status of a report run and what it did, in words (one line)."""
    if not result.success:
        failure = next((e for e in result.all_events if e.is_failure), None)
        why = failure.message if failure is not None else "the run failed"
        error = failure.step_failure_data.error if failure and failure.is_step_failure else None
        if error is not None:  # the exception, not only "step … failed"
            why = f"{why} {error.message}"  # e.g. "ValueError: …"
        return 1, f"failed (run {result.run_id}): {' '.join(why.split())}"
    counts = result.output_for_node(op)
    outcomes = [o for o in ("sent", "already_sent", "suppressed") if o in counts]
    if not outcomes and "skipped_nothing_due" in counts:
        return 0, "not sent: nothing is due or overdue (recorded as nothing_due)"
    if not outcomes:  # skipped: nobody to send it to
        return 1, f"skipped: {counts.get('reason', counts)}"
    said = ", ".join(f"{counts[o]} {o}" for o in outcomes)
    hint = " (again with --force)" if outcomes == ["already_sent"] else ""
    return 0, f"{said} as {counts['key']}{hint}"


def register(commands: Any) -> None:
    """Add ``report preview`` and ``report send``."""
    report = commands.add_parser("report", help="render a report, or send one")
    sub = report.add_subparsers(dest="report_command", required=True)
    preview = sub.add_parser("preview", help="the morning list or the Friday overview, as text")
    preview.add_argument("kind", choices=("morning", "weekly"))
    preview.add_argument(
        "--date", type=date.fromisoformat, help="the day (YYYY-MM-DD; default today)"
    )
    preview.add_argument("--lang", choices=("de", "en"), help="default FOLLOWUP_REPORT_LANGUAGE")
    preview.add_argument("--html", type=Path, help="also write the HTML to this file")
    preview.add_argument(
        "--for",
        dest="person",
        metavar="USER_ID",
        help="the morning list of one salesperson (their CRM user id), not the team's",
    )
    preview.set_defaults(handler=_preview)
    send = sub.add_parser(
        "send", help="send a report's window once (the current one by default), as its job does"
    )
    send.add_argument("kind", choices=("morning", "weekly"))
    send.add_argument(
        "--date",
        type=date.fromisoformat,
        help="a day of the window (YYYY-MM-DD; default today): its weekday, or on a weekend the "
        "Friday before, for the morning list; the latest Friday for the overview",
    )
    send.add_argument(
        "--force", action="store_true", help="send it again, though the window went out already"
    )
    send.set_defaults(handler=_send)
