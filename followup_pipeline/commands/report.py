"""``followup report preview morning|weekly [--date D] [--lang de|en] [--html FILE]``: render a
report from the machine's data without sending it (and without recording anything)."""

from __future__ import annotations

import argparse
import contextlib
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from followup_pipeline.clock import build_clock
from followup_pipeline.domain.localtime import local_date
from followup_pipeline.domain.reports import Language, render_morning, render_weekly
from followup_pipeline.machine import NoInstance, open_instance
from followup_pipeline.settings import Settings
from followup_pipeline.store.db import connect, resolve_database_url


def _preview(args: argparse.Namespace, settings: Settings) -> int:
    # Imported here: the report module loads Dagster, which the other commands do not need.
    from followup_pipeline.defs.report.gather import last_evaluate_ok, morning_data, weekly_data

    now = build_clock(settings.now).now()
    today = local_date(now, settings.timezone)
    day: date = args.date or today
    language: Language = args.lang or settings.report_language
    url = resolve_database_url(settings)
    with contextlib.ExitStack() as stack:
        try:
            instance = stack.enter_context(open_instance(settings))
        except NoInstance as error:
            print(f"(Dagster's runs not read: {error})")
            instance = None
        with connect(url, autocommit=True) as conn:
            if args.kind == "morning":
                data = morning_data(conn, settings, day, now, last_evaluate_ok(instance))
                rendered = render_morning(data, language)
            else:
                friday = day - timedelta(days=(day.weekday() - 4) % 7)  # the last Friday
                rendered = render_weekly(
                    weekly_data(conn, settings, friday, now, instance), language
                )
    print(f"Subject: {rendered.subject}\n")
    print(rendered.text)
    if args.html is not None:
        args.html.write_text(rendered.html, encoding="utf-8")
        print(f"(HTML written to {args.html})")
    return 0


def register(commands: Any) -> None:
    """Add ``report preview``."""
    report = commands.add_parser("report", help="render a report without sending it")
    sub = report.add_subparsers(dest="report_command", required=True)
    preview = sub.add_parser("preview", help="the morning list or the Friday overview, as text")
    preview.add_argument("kind", choices=("morning", "weekly"))
    preview.add_argument(
        "--date", type=date.fromisoformat, help="the day (YYYY-MM-DD; default today)"
    )
    preview.add_argument("--lang", choices=("de", "en"), help="default FOLLOWUP_REPORT_LANGUAGE")
    preview.add_argument("--html", type=Path, help="also write the HTML to this file")
    preview.set_defaults(handler=_preview)
