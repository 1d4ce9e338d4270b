"""``followup doctor``: one line per check of the whole machine, non-zero exit on any fault
(``FAIL``); a warning (``WARN``: e.g. no report recipients, no alert owner) is counted apart and
exits 0.

Settings, the database and its schema, the cadence row, lead intake's mode (shadow or live),
each schedule's and sensor's state, the daemon's heartbeat, the ingress, the last webhook, and
each vendor's credentials and configuration (the CRM knows the configured stages, the ClickUp
list exists and can close tasks, Graph grants a token, Mistral accepts the key and knows the
model, the company lookup accepts its key, each academy's Moodle and credential platform answer),
who receives the reports and the alerts, and each pipeline's mode. Run from any folder of the
checkout with nothing exported: it reads the machine as ``followup dagster`` does.
"""

from __future__ import annotations

import argparse
import logging
import re
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import psycopg

from followup_pipeline.clock import build_clock
from followup_pipeline.commands import probes, probes_learning
from followup_pipeline.commands.lead_switch import describe
from followup_pipeline.commands.probes import Check, fail, ok, warn
from followup_pipeline.domain.census import quiet_now, views
from followup_pipeline.domain.localtime import for_people
from followup_pipeline.domain.watchdog import LOOKED, watchdog_silent
from followup_pipeline.engine import work as work_list
from followup_pipeline.integrations.errors import IntegrationError
from followup_pipeline.machine import (
    LOCATION,
    NoInstance,
    open_instance,
    read_addresses,
    vendor_mode,
    with_sandbox,
)
from followup_pipeline.settings import ConfigError, Settings
from followup_pipeline.store import census, lead_mode, lms, work
from followup_pipeline.store.cadences import UnknownCadence, cadence_offsets
from followup_pipeline.store.db import StoreError, connect, resolve_database_url
from followup_pipeline.store.enrichments import cursor_of
from followup_pipeline.store.events import webhook_silence
from followup_pipeline.store.holidays import load_calendar
from followup_pipeline.store.migrate import available_migrations, current_version

#: The daemons a machine needs, and how old their last heartbeat may be (they beat every 30 s).
DAEMONS = ("SCHEDULER", "SENSOR", "QUEUED_RUN_COORDINATOR", "BACKFILL")
HEARTBEAT_LATE = timedelta(minutes=5)
#: With no webhook for this long while reconciliation keeps finding deals, say why it may be.
WEBHOOK_SILENCE = timedelta(days=1)
#: How far back the census is read (its weeks, and whether a quiet stage had deals before).
CENSUS_SHOWN = timedelta(days=120)


def examine(settings: Settings) -> Iterator[Check]:
    """Every check of the machine, in the order an operator reads them."""
    try:
        mode = vendor_mode(settings)
    except ConfigError as error:
        yield fail("vendors", str(error))
        return
    settings = with_sandbox(settings)
    yield ok(
        "settings",
        f"time zone {settings.timezone}, holidays {settings.holiday_country}, "
        f"watched stages {', '.join(settings.watched_stages)}, {mode} vendors",
    )
    try:
        url = resolve_database_url(settings)
        yield from _database(url, settings)
    except (ConfigError, StoreError) as error:
        yield fail("database", str(error))
    yield from _dagster(settings)
    yield _ingress(settings)
    yield from _vendor("espocrm", lambda: probes.espocrm(settings))
    yield from _vendor("clickup", lambda: probes.clickup(settings))
    yield from _vendor("clickup users", lambda: probes.clickup_users(settings))
    yield from _vendor("outlook", lambda: probes.outlook(settings))
    yield recipients_check(settings)
    yield from _vendor("mistral", lambda: probes.mistral(settings))
    yield from _vendor("company lookup", lambda: probes_learning.company_lookup(settings))
    yield from _vendor("alerts", lambda: probes.alerts(settings))
    yield from _learning(settings)


def _learning(settings: Settings) -> Iterator[Check]:
    """Each pipeline's mode on one line, then each academy's Moodle (and its credential
    platform account, if it certifies courses), but those switched off."""
    try:
        with connect(resolve_database_url(settings), autocommit=True) as conn:
            tenants = lms.tenants(conn)
            leads = lead_mode.in_force(conn, settings).mode
    except (ConfigError, StoreError, psycopg.Error):
        return  # the database check says what is wrong with it
    yield modes_check(settings, leads, tenants)
    yield probes_learning.links(settings, tenants, mode=vendor_mode(settings))
    for tenant in tenants:
        if tenant.mode != "off":
            yield from _vendor(
                f"moodle {tenant.id}", partial(probes_learning.moodle, settings, tenant)
            )
            if tenant.credential_groups:
                name = f"credentials {tenant.id}"
                yield from _vendor(name, partial(probes_learning.credentials, settings, tenant))


def modes_check(settings: Settings, leads: str, tenants: list[lms.Tenant]) -> Check:
    """What each pipeline does now: deal follow-up live or a dry run, lead intake live or in
    shadow, each academy live, dry or off."""
    deals = "dry run (FOLLOWUP_DRY_RUN: nothing is sent)" if settings.dry_run else "live"
    academies = ", ".join(f"{t.id} {t.mode}" for t in tenants) or "none"
    return ok("modes", f"deal follow-up {deals}; lead intake {leads}; academies: {academies}")


#: What an e-mail address looks like, enough to catch a typo (a missing @, a space, no domain).
ADDRESS = re.compile(r"[^@\s,;]+@[^@\s,;]+\.[^@\s,;]+")


def recipients_check(settings: Settings) -> Check:
    """Who the morning lists and the Friday overview go to; none set is a warning: the report
    jobs then run, send nothing and say so."""
    own = len(settings.salesperson_addresses)
    personal = f"; {own} salesperson(s) get their own morning list" if own else ""
    given = [*settings.report_recipients, *settings.salesperson_addresses.values()]
    wrong = [address for address in given if not ADDRESS.fullmatch(address)]
    if wrong:
        return fail("reports", f"no e-mail address: {', '.join(map(repr, wrong))}")
    if settings.report_recipients:
        return ok("reports", f"sent to {', '.join(settings.report_recipients)}{personal}")
    if own:
        return warn(
            "reports",
            f"FOLLOWUP_REPORT_RECIPIENTS is not set: {own} salesperson(s) get their own morning "
            "list, nobody gets the team's list or the Friday overview",
        )
    return warn(
        "reports",
        "FOLLOWUP_REPORT_RECIPIENTS is not set: the morning list and the Friday overview go to "
        "nobody (their runs are skipped)",
    )


def _database(url: str, settings: Settings) -> Iterator[Check]:
    version, latest = current_version(url), available_migrations()[-1].version
    if version == latest:
        yield ok("database", f"reachable, schema version {version}")
    else:
        yield fail(
            "database", f"schema version {version} of {latest}: run `followup migrate` to update"
        )
    with connect(url, autocommit=True) as conn:
        try:
            offsets = cadence_offsets(conn, settings.cadence_name)
            days = ", ".join(map(str, offsets))
            yield ok("cadence", f"{settings.cadence_name!r}: business days {days}")
        except UnknownCadence as error:
            yield fail("cadence", str(error))
        yield lead_mode_check(conn, settings)
        yield work_check(conn, settings, now=datetime.now(UTC))
        yield from census_checks(conn, settings, now=build_clock(settings.now).now())
        yield watchdog_check(conn, settings, now=datetime.now(UTC))
        if settings.espocrm_webhooks:
            now = build_clock(settings.now).now()
            yield webhook_check(conn, now=now, zone=settings.timezone)
        else:
            yield ok(
                "webhooks", "none configured (FOLLOWUP_ESPOCRM_WEBHOOKS): reconciliation alone"
            )


def lead_mode_check(conn: Any, settings: Settings) -> Check:
    """Whether lead intake writes to the CRM (live) or only records what it would (shadow); a
    warning when ``FOLLOWUP_LEAD_INTAKE_MODE`` is set to another mode than the one on record."""
    try:
        mode = lead_mode.in_force(conn, settings)
    except psycopg.errors.UndefinedTable:
        return fail("lead intake", "its mode is not in the database yet: run `followup migrate`")
    line = describe(mode, settings).removeprefix("lead intake: ")
    set_to = settings.lead_intake_mode
    if "lead_intake_mode" in settings.model_fields_set and set_to != mode.record.mode:
        return warn(
            "lead intake",
            f"{line}; FOLLOWUP_LEAD_INTAKE_MODE={set_to} is set but only seeds a new "
            f"installation: `followup leads {'go-live' if set_to == 'live' else 'shadow'}` "
            "switches",
        )
    if mode.mode == "live":
        return ok("lead intake", f"{line}: each lead is written to the CRM")
    return ok(
        "lead intake",
        f"{line}: nothing is written to the CRM, what would be is kept for `followup leads "
        "compare`; `followup leads go-live` switches",
    )


def work_check(conn: Any, settings: Settings, *, now: datetime) -> Check:
    """What waits for a person in the work list, brought up to date first (the alert checks may
    not be running): open items (nobody acknowledged them) warn, with the oldest's age and the
    pipelines; acknowledged ones are owned, and said."""
    try:
        work_list.sync(conn, settings, at=now)
        counts = work.counts(conn)
    except psycopg.errors.UndefinedTable:
        return fail("work list", "not in the database yet: run `followup migrate`")
    open_ = [c for c in counts if c.state == "open"]
    acknowledged = sum(c.items for c in counts if c.state == "acknowledged")
    owned = f"; {acknowledged} acknowledged" if acknowledged else ""
    if not open_:
        return ok("work list", f"nothing open{owned}")
    pipelines: dict[str, int] = {}
    for count in open_:
        pipelines[count.pipeline] = pipelines.get(count.pipeline, 0) + count.items
    oldest = min(c.oldest for c in open_)
    hours = (now - oldest).total_seconds() / 3600
    parts = ", ".join(f"{n} {p}" for p, n in sorted(pipelines.items()))
    return warn(
        "work list",
        f"{sum(pipelines.values())} open ({parts}), the oldest {hours:.1f} h{owned}: "
        "`followup work list`",
    )


def census_checks(conn: Any, settings: Settings, *, now: datetime) -> Iterator[Check]:
    """Each watched stage's census over the last weeks (deals listed now, entered by week); a
    warning for one gone quiet (the alert checks mail it too)."""
    try:
        rows = census.since(conn, now.date() - CENSUS_SHOWN, zone=settings.timezone)
    except psycopg.errors.UndefinedTable:
        yield fail("census", "not in the database yet: run `followup migrate`")
        return
    today = now.astimezone(ZoneInfo(settings.timezone)).date()
    calendar = load_calendar(conn, settings.holiday_country, settings.holiday_subdivision)
    found = quiet_now(
        rows,
        settings.watched_stages,
        calendar=calendar,
        today=today,
        days=settings.census_quiet_days,
    )
    quiet = {q.stage: q for q in found}
    for view in views(rows, settings.watched_stages, today):
        name = f"census {view.stage}"
        if view.stage in quiet:
            yield warn(name, f"{view.line()}: {quiet[view.stage].message}")
        else:
            yield ok(name, view.line())


def watchdog_check(conn: Any, settings: Settings, *, now: datetime) -> Check:
    """When the watchdog (``followup watchdog``) last looked; a warning when it went silent."""
    looked = cursor_of(conn, LOOKED)
    if looked is None:
        return ok(
            "watchdog",
            "none has looked on this machine yet: `make run` starts one; in production "
            "deploy/ runs it (a systemd timer, a compose service, a CronJob)",
        )
    silent = watchdog_silent(looked, now=now, every_s=settings.watchdog_every_s)
    if silent is not None:
        return warn("watchdog", silent.message)
    return ok("watchdog", f"its last look {int((now - looked).total_seconds())} s ago")


def webhook_check(conn: Any, *, now: datetime, zone: str) -> Check:
    """When the last webhook came, in the team's ``zone`` as a person reads it, and a warning when
    none came for a day while the CRM's deals changed (EspoCRM refuses private targets it was not
    told of)."""
    silence = webhook_silence(conn, since=now - WEBHOOK_SILENCE)
    last = silence.last_webhook_at
    if last is not None and now - last < WEBHOOK_SILENCE:
        return ok("webhooks", f"the last one arrived {for_people(last, zone)}")
    if silence.reconciled_since == 0:
        when = f"since {for_people(last, zone)}" if last else "ever"
        return ok("webhooks", f"none {when}; the CRM's watched deals did not change either")
    return Check(
        "WARN",
        "webhooks",
        f"none for a day while reconciliation opened {silence.reconciled_since} watch(es): "
        "EspoCRM 9.3.2+ refuses a webhook target on a private address unless it is in "
        "webhookAllowedAddressList (Administration > Settings); deals still come in, an hour "
        "late, through reconciliation",
    )


def _dagster(settings: Settings) -> Iterator[Check]:
    """Each schedule's and sensor's state, and the daemons' heartbeats."""
    from followup_pipeline.defs import build_definitions

    try:
        instance = open_instance(settings)
    except NoInstance as error:
        yield fail("dagster", str(error))
        return
    with instance:
        repository = build_definitions(settings).get_repository_def()
        stored = {
            state.instigator_name: state
            for state in instance.all_instigator_state()
            if state.origin.repository_origin.code_location_origin.location_name == LOCATION
        }
        instigators: list[tuple[str, Any]] = [
            *(("schedule", d) for d in repository.schedule_defs),
            *(("sensor", d) for d in repository.sensor_defs),
        ]
        for kind, definition in instigators:
            yield _instigator(kind, definition, stored.get(definition.name))
        yield _heartbeats(dict(instance.get_daemon_heartbeats()))


def _instigator(kind: str, definition: Any, state: Any) -> Check:
    """A schedule or sensor: running, or stopped (nothing will start it)."""
    stored = str(state.status.value) if state is not None else "DECLARED_IN_CODE"
    running = (
        stored == "RUNNING"
        if stored != "DECLARED_IN_CODE"
        else str(definition.default_status.value) == "RUNNING"
    )
    name = f"{kind} {definition.name}"
    if running:
        return ok(name, "running")
    return fail(
        name,
        f"stopped: nothing starts it until it is switched on again (Dagster UI > Automation, "
        f"or `followup dagster {kind} start {definition.name}`)",
    )


def _heartbeats(beats: dict[str, Any]) -> Check:
    now = time.time()
    late = []
    for daemon in DAEMONS:
        beat = beats.get(daemon)
        if beat is None:
            late.append(f"{daemon} never")
        elif now - beat.timestamp > HEARTBEAT_LATE.total_seconds():
            late.append(f"{daemon} {int(now - beat.timestamp)} s ago")
    if late:
        return fail(
            "daemon",
            f"no recent heartbeat ({', '.join(late)}): schedules and sensors do not fire; "
            "is the machine running (`make run`)?",
        )
    oldest = max(now - beats[d].timestamp for d in DAEMONS)
    return ok("daemon", f"{', '.join(DAEMONS)} beating (oldest {int(oldest)} s ago)")


def _ingress(settings: Settings) -> Check:
    """The ingress's ``/healthz``, where the machine's last start served it."""
    served = read_addresses(settings).get("ingress")
    url = f"{served or f'http://{settings.ingress_host}:{settings.ingress_port}'}/healthz"
    try:
        answer = httpx.get(url, timeout=5)
    except httpx.HTTPError as error:
        return fail("ingress", f"{url} does not answer ({type(error).__name__}): webhooks are lost")
    if answer.status_code != 200:
        return fail("ingress", f"{url} answered {answer.status_code}: {answer.text[:200]}")
    return ok("ingress", f"{url} healthy")


def _vendor(name: str, check: Callable[[], Check]) -> Iterator[Check]:
    """Run one vendor's check; the vendor's error (a refused credential, a missing list, no
    answer) is its failure."""
    try:
        yield check()
    except (IntegrationError, ValueError) as error:
        yield fail(name, str(error))


def _doctor(args: argparse.Namespace, settings: Settings) -> int:
    # The vendor clients log each failed attempt; the check's own line says what failed.
    logging.getLogger("followup_pipeline.integrations").setLevel(logging.ERROR)
    checks = list(examine(settings))
    for check in checks:
        print(check.line(), flush=True)
    faults = [c for c in checks if c.level == "FAIL"]
    warnings = [c for c in checks if c.level == "WARN"]
    good = len(checks) - len(faults) - len(warnings)
    print(f"{good} ok, {len(warnings)} warning(s), {len(faults)} fault(s)")
    return 1 if faults else 0


def register(commands: Any) -> None:
    """Add ``doctor``."""
    doctor = commands.add_parser(
        "doctor", help="check the whole machine: settings, database, Dagster, ingress, vendors"
    )
    doctor.set_defaults(handler=_doctor)
