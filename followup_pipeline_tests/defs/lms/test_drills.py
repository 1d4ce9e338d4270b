"""Restart drills of learning reminders, on a real Postgres against the sandbox (figures:
docs/reliability.md). One academy: a learner with reminders due, a learner whose completed course
is certified, and approved content due; each drill ends with every due action done once.

- Rebuilt: the machine's processes stopped and its home deleted, only the database kept; a new
  home and new processes (Dagster's own ``job execute``) go on from the records.
- Outages shorter and longer than the 15 minutes between two ticks: Dagster's scheduler, after
  the restart, launches only the latest missed tick (as ``test_missed_ticks.py`` measures it);
  that one late run sends every reminder due meanwhile, once.
- Two workers at once: two processes run the job at the same instant: each action once.
- Killed after the provider accepted and before our commit (a real SIGKILL while the answer is
  on its way), at Graph, at Moodle and at Accredible: the next run reads each back, sends
  nothing twice.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from followup_pipeline.sandbox.environment import env_lines
from followup_pipeline.store import lms_content

from ...conftest import with_database
from ...scheduling import DEPRECATIONS, Scheduler
from .lms_world import BERLIN, SANDBOX, control, make_tenant, run_lms, seed_site, utc

pytestmark = [pytest.mark.slow, *DEPRECATIONS]
ZONE = ZoneInfo("Europe/Berlin")
#: Monday 9 March 2026, 09:05 in Berlin: the learner's first reminder (09:00) is due.
MONDAY = utc(2026, 3, 9, 8, 5)
#: Wednesday 11 March, 09:05 in Berlin: the quiz's due-day reminder (09:00) is due.
WEDNESDAY = utc(2026, 3, 11, 8, 5)
QUARTER = timedelta(minutes=15)
RUN_LMS = """
import json, sys, time
import dagster as dg
from datetime import datetime
from followup_pipeline_tests.defs.lms import lms_world

args = json.loads(sys.argv[1])
lms_world.SHARED["instance"] = dg.DagsterInstance.ephemeral()
started = time.time()
counts = lms_world.run_lms(args["db_url"], args["sandbox"], datetime.fromisoformat(args["now"]),
                           **args["settings"])
print(json.dumps({"started": started, "ended": time.time(), "counts": counts}))
"""


def _academy(db: psycopg.Connection[Any], sandbox: str) -> dict[str, Any]:
    """The academy of every drill: learner 0 completed the course (a certificate, no reminder),
    learner 1 did not (reminders); a page approved and due since Sunday."""
    seeded = seed_site(sandbox, BERLIN, utc(2026, 3, 11, 16), learners=2)
    course = seeded["course"]
    make_tenant(
        db, sandbox, BERLIN, course,
        credential_token_ref="ACADEMY_BERLIN_CREDENTIALS",
        credential_groups={str(course): 9549},
        owner="owner@academy-berlin.example",
    )  # fmt: skip
    control(sandbox, "POST", f"/moodle/{BERLIN}/quizzes/{seeded['quiz']}/complete",
            {"userid": seeded["users"][0]})  # fmt: skip
    [page] = control(sandbox, "POST", f"/moodle/{BERLIN}/modules",
                     {"course": course, "name": "Week 1"})["modules"]  # fmt: skip
    version = lms_content.ContentVersion(
        tenant_id=BERLIN, content_id="week-1", version=1, title="Week 1", course_id=course,
        cmid=page["id"], publish_at=utc(2026, 3, 8, 8),
    )  # fmt: skip
    with db.transaction():
        lms_content.save(db, version)
        lms_content.approve(db, BERLIN, "week-1", 1, by="Dana Editor", at=utc(2026, 3, 8, 9))
    return {**seeded, "page": page["id"]}


def _outcome(db: psycopg.Connection[Any], sandbox: str) -> dict[str, Any]:
    """What the vendors hold and what the ledger says, for the drills' expectations."""
    outbox = control(sandbox, "GET", "/outbox")["messages"]
    mails = Counter(m["message"]["subject"] for m in outbox)
    credentials = Counter(
        (c["recipient_email"], c["group_id"])
        for c in control(sandbox, "GET", "/accredible/credentials")["credentials"]
    )
    world = control(sandbox, "GET", f"/moodle/{BERLIN}")
    actions = db.execute(
        "SELECT kind, outcome, count(*) AS n, sum(attempts) AS attempts FROM actions"
        " GROUP BY kind, outcome ORDER BY kind, outcome"
    ).fetchall()
    return {
        "mails": sum(mails.values()),
        "mails_doubled": sum(1 for n in mails.values() if n > 1),
        "credentials": sum(credentials.values()),
        "credentials_doubled": sum(1 for n in credentials.values() if n > 1),
        "shown": sum(m["visible"] for m in world["modules"]),
        "actions": {(a["kind"], a["outcome"]): int(a["n"]) for a in actions},
    }


def _settled(outcome: dict[str, Any], *, mails: int) -> None:
    """Every due action done once: the reminders' mails, one certificate, one publication."""
    assert outcome["mails"] == mails
    assert outcome["mails_doubled"] == 0
    assert outcome["credentials"] == 1
    assert outcome["credentials_doubled"] == 0
    assert outcome["shown"] == 1
    assert outcome["actions"][("certificate", "confirmed")] == 1
    assert outcome["actions"][("publication", "confirmed")] == 1
    assert outcome["actions"][("reminder", "confirmed")] == mails


def _machine_env(
    sandbox: str, db_url: str, storage: str, home: Path, now: datetime
) -> dict[str, str]:
    """A machine's environment on real vendors (the sandbox's URLs and keys), its home
    ``home``, its two databases and its clock."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("FOLLOWUP_")}
    for line in env_lines(SANDBOX, sandbox):
        [pair] = shlex.split(line)
        name, _, value = pair.partition("=")
        env[name] = value
    name = str(conninfo_to_dict(storage)["dbname"])
    env |= {
        "FOLLOWUP_HOME": str(home),
        "FOLLOWUP_DATABASE_URL": db_url,
        "FOLLOWUP_DAGSTER_PG_URL": with_database(storage, name, driver="postgresql+psycopg2"),
        "FOLLOWUP_NOW": now.isoformat(),
        "FOLLOWUP_ACTION_IN_FLIGHT_S": "0",
        "FOLLOWUP_PARTITIONS_START": "2026-01-01",
    }
    return env


def test_drill_a_rebuilt_machine_keeps_only_the_database_and_goes_on_once(
    db: psycopg.Connection[Any],
    db_url: str,
    sandbox: str,
    tmp_path: Path,
    database_factory: Callable[..., str],
) -> None:
    _academy(db, sandbox)
    storage = database_factory()
    followup = str(Path(sys.executable).with_name("followup"))
    command = [followup, "dagster", "job", "execute", "-j", "lms_reminders"]
    first_home = tmp_path / "machine-1"
    env = _machine_env(sandbox, db_url, storage, first_home, MONDAY)
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=240,
                          env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    _settled(_outcome(db, sandbox), mails=1)
    # The container is rebuilt: its processes are gone and so is its disk (the instance's home,
    # dagster.yaml, logs); only the database is kept.
    shutil.rmtree(first_home)
    second_home = tmp_path / "machine-2"
    env = _machine_env(sandbox, db_url, storage, second_home, WEDNESDAY)
    again = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=240,
                           env=env)  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    # Wednesday's due-day reminder went out; Monday's did not again, nor the certificate or page.
    _settled(_outcome(db, sandbox), mails=2)
    with psycopg.connect(storage, autocommit=True) as dagster_db:
        runs = dagster_db.execute(
            "SELECT status FROM runs WHERE pipeline_name = 'lms_reminders' ORDER BY id"
        ).fetchall()
    assert [r[0] for r in runs] == ["SUCCESS", "SUCCESS"]  # the first machine's run is on record


def _late_runs(scheduler: Scheduler, seen: int) -> list[datetime]:
    """The ticks of ``lms_reminders_every_15_min`` launched since the first ``seen`` runs."""
    ticks = sorted(tick for tick, _ in scheduler.runs().get("lms_reminders_every_15_min", []))
    return ticks[seen:]


def test_drill_outages_shorter_and_longer_than_a_tick_end_in_one_late_run_that_sends_once(
    db: psycopg.Connection[Any], db_url: str, sandbox: str, scheduler: Scheduler
) -> None:
    _academy(db, sandbox)
    alive = datetime(2026, 3, 9, 8, 50, tzinfo=ZONE)
    assert scheduler.iterate(alive) == []  # the daemon's first look: no tick of its own yet
    assert _late_runs(scheduler, 0) == []
    run_lms(db_url, sandbox, alive)  # 08:50: nothing due yet
    assert _outcome(db, sandbox)["mails"] == 0
    # Down from 08:52 to 09:04: twelve minutes, the 09:00 tick missed.
    back = datetime(2026, 3, 9, 9, 4, tzinfo=ZONE)
    assert scheduler.iterate(back, restarted=True) == []
    assert _late_runs(scheduler, 0) == [datetime(2026, 3, 9, 9, 0, tzinfo=ZONE)]
    run_lms(db_url, sandbox, back)  # the late 09:00 run, at 09:04
    _settled(_outcome(db, sandbox), mails=1)
    # Down from 09:05 Monday to 12:40 Wednesday: 206 ticks missed, the due-day reminder among.
    down, long_back = back + timedelta(minutes=1), datetime(2026, 3, 11, 12, 40, tzinfo=ZONE)
    missed = (long_back - down) // QUARTER
    assert missed == 206
    assert scheduler.iterate(long_back, restarted=True) == []
    assert _late_runs(scheduler, 1) == [datetime(2026, 3, 11, 12, 30, tzinfo=ZONE)]
    run_lms(db_url, sandbox, long_back)
    _settled(_outcome(db, sandbox), mails=2)
    sent = db.execute(
        "SELECT action_type, due_at, settled_at FROM lms_reminders"
        " WHERE delivery_outcome = 'confirmed' ORDER BY due_at"
    ).fetchall()
    delays = [row["settled_at"] - row["due_at"] for row in sent]
    assert [r["action_type"] for r in sent] == ["before_due", "due_day"]
    assert delays == [timedelta(minutes=4), timedelta(hours=3, minutes=40)]


def _start(
    db_url: str, sandbox: str, script: Path, now: datetime, **settings: Any
) -> subprocess.Popen[str]:
    args = {"db_url": db_url, "sandbox": sandbox, "now": now.isoformat(), "settings": settings}
    root = str(Path(__file__).resolve().parents[3])  # the test package is importable there
    return subprocess.Popen(
        [sys.executable, str(script), json.dumps(args)],
        env={**os.environ, "PYTHONPATH": root},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_drill_two_workers_at_once_do_each_action_once(
    db: psycopg.Connection[Any], db_url: str, sandbox: str, tmp_path: Path
) -> None:
    _academy(db, sandbox)
    script = tmp_path / "run_lms.py"
    script.write_text(RUN_LMS)
    # Every vendor answers slowly, so that the two runs overlap at each of them.
    for vendor in ("graph", "moodle", "accredible"):
        control(sandbox, "POST", "/faults", {"vendor": vendor, "kind": "latency", "latency_s": 0.3})
    workers = [_start(db_url, sandbox, script, MONDAY) for _ in range(2)]
    spans = []
    for worker in workers:
        out, err = worker.communicate(timeout=240)
        assert worker.returncode == 0, err[-3000:]
        spans.append(json.loads(out.strip().splitlines()[-1]))
    control(sandbox, "DELETE", "/faults")
    # The two runs were at work at the same time.
    assert max(s["started"] for s in spans) < min(s["ended"] for s in spans)
    _settled(_outcome(db, sandbox), mails=1)


def _wait(check: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.1)


@pytest.mark.parametrize(
    ("vendor", "fault", "accepted"),
    [
        ("graph", {"method": "POST", "path": "sendMail"}, lambda o: o["mails"] == 1),
        ("moodle", {"function": "core_courseformat_update_course"}, lambda o: o["shown"] == 1),
        ("accredible", {"method": "POST", "path": "/v1/credentials$"},
         lambda o: o["credentials"] == 1),
    ],
    ids=["graph-mail", "moodle-publication", "accredible-certificate"],
)  # fmt: skip
def test_drill_a_run_killed_after_the_provider_accepted_is_settled_by_reading_back(
    db: psycopg.Connection[Any],
    db_url: str,
    sandbox: str,
    tmp_path: Path,
    vendor: str,
    fault: dict[str, Any],
    accepted: Callable[[dict[str, Any]], bool],
) -> None:
    _academy(db, sandbox)
    script = tmp_path / "run_lms.py"
    script.write_text(RUN_LMS)
    slow = {"vendor": vendor, "kind": "latency", "latency_s": 60, "applied": True, **fault}
    control(sandbox, "POST", "/faults", slow)
    run = _start(db_url, sandbox, script, MONDAY)
    _wait(lambda: accepted(_outcome(db, sandbox)), f"{vendor} to accept")
    run.kill()  # SIGKILL: the provider has it, our commit never comes
    run.communicate()
    control(sandbox, "DELETE", "/faults")
    attempted = db.execute("SELECT kind FROM actions WHERE outcome = 'attempted'").fetchall()
    assert len(attempted) == 1  # the killed run's action, left attempted
    run_lms(db_url, sandbox, MONDAY + QUARTER)
    _settled(_outcome(db, sandbox), mails=1)
    found = db.execute(
        "SELECT kind FROM actions WHERE last_error IN ('found by read-back', 'visible')"
    ).fetchall()
    assert [row["kind"] for row in found] == [attempted[0]["kind"]]
