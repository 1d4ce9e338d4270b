"""Learning reminders at scale: one tenant, one course, learners x 10 quizzes closing within ten
days, a fifth of the pairs completed, in the sandbox's Moodle over HTTP. A tenant's sync is timed
twice: the day's first (it reads every learner's completions) and a quiet one after it (it reads
none); for each, the wall time, the time spent waiting for Moodle (timed at the HTTP transport),
the rest (the sync's own work), Moodle's requests and the statements sent to Postgres. The
baseline, in the same run: the same number of reminder rows inserted in one statement."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg

from benchmarks.harness import SANDBOX, database, sandbox_with_state
from followup_pipeline.defs.lms.sync import sync_tenant
from followup_pipeline.integrations.moodle import MoodleClient
from followup_pipeline.resources import PostgresResource
from followup_pipeline.sandbox import moodle_demo
from followup_pipeline.sandbox.state import SandboxState
from followup_pipeline.store import lms

SITE = "academy-berlin"
QUIZZES = 10
#: Learners per point (x 10 quizzes: the pairs).
POINTS = (100, 1_000, 10_000)  # 1,000, 10,000 and 100,000 pairs
START = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
#: The name of the tenant's Moodle token (the sync is handed its client; the name is not read).
TOKEN_REF = "ACADEMY_SCALE"  # noqa: S105 (a name, not a secret)


class TimedTransport(httpx.BaseTransport):
    """An HTTP transport that counts the requests and the time spent waiting for them."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.requests = 0
        self.waited = 0.0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        started = time.perf_counter()
        try:
            response = self.inner.handle_request(request)
            response.read()
            return response
        finally:
            self.requests += 1
            self.waited += time.perf_counter() - started


def _seed(base: str, state: SandboxState, learners: int) -> int:
    """The course and its quizzes (through the control API), its learners enrolled and a fifth
    of the pairs completed (written into the site's records as the control API writes them: it
    adds a learner at a time, with a search of every enrolment, too slow for 10,000); the course
    id."""
    answer = httpx.post(
        f"{base}/_sandbox/moodle/{SITE}/courses", json={"fullname": "Scale"}, timeout=60
    )
    answer.raise_for_status()
    course = int(answer.json()["courses"][0]["id"])
    closing = [int((START + timedelta(days=1 + q)).timestamp()) for q in range(QUIZZES)]
    quizzes = [
        moodle_demo.add_quiz(state, SITE, {"course": course, "name": f"Quiz {q}", "timeclose": at})
        for q, at in enumerate(closing)
    ]
    world = moodle_demo.known(state, SITE)
    first = max((u["id"] for u in world["users"]), default=0) + 1
    for n in range(learners):
        user_id = first + n
        world["users"].append(
            {"id": user_id, "username": f"l{n}.scale", "firstname": f"L{n}", "lastname": "Scale",
             "email": f"l{n}@scale.example", "messaging": "coursemember",
             "lang": world["lang"], "timezone": world["timezone"]}
        )  # fmt: skip
        world["enrolments"].append(
            {"courseid": course, "userid": user_id, "role": "student", "active": True}
        )
        for q, quiz in enumerate(quizzes):
            if (n + q) % 5 == 0:
                world["completions"].append(
                    {"userid": user_id, "cmid": quiz["coursemodule"], "state": 2,
                     "timecompleted": int(START.timestamp()) - 3600}
                )  # fmt: skip
    return course


def _statements(db_url: str) -> int:
    with psycopg.connect(db_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit + xact_rollback AS n FROM pg_stat_database"
            " WHERE datname = current_database()"
        ).fetchone()
    return int(row[0]) if row else 0


def _sync(db_url: str, base: str, tenant: lms.Tenant, at: datetime, whole: bool) -> dict[str, Any]:
    transport = TimedTransport()
    token = SANDBOX.moodle_tokens[SITE].get_secret_value()
    site = MoodleClient(f"{base}/moodle/{SITE}", token, transport=transport)
    postgres = PostgresResource(url=db_url)
    before = _statements(db_url)
    started = time.perf_counter()
    synced = sync_tenant(postgres, tenant, site, now=at, completions=whole)
    wall = time.perf_counter() - started
    return {
        "wall": wall,
        "moodle": transport.waited,
        "own": wall - transport.waited,
        "requests": transport.requests,
        "transactions": _statements(db_url) - before,
        "planned": synced.planned,
        "assignments": synced.assignments,
    }


def _baseline(db_url: str, rows: int) -> float:
    """Seconds to insert ``rows`` reminder rows in one statement (a table shaped like
    ``lms_reminders``)."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "CREATE TEMP TABLE bench_reminders"
            " (LIKE followup.lms_reminders INCLUDING DEFAULTS INCLUDING IDENTITY)"
        )
        started = time.perf_counter()
        conn.execute(
            "INSERT INTO bench_reminders (tenant_id, learner_id, assignment_id, action_type,"
            " due_at, time_zone, local_day, idempotency_key)"
            " SELECT 't', n / 30, n %% 30, 'before_due', now(), 'UTC', current_date, 'k' || n"
            " FROM generate_series(1, %s) AS n",
            (rows,),
        )
        return time.perf_counter() - started


def run() -> list[str]:
    """The section of docs/benchmarks.md."""
    lines = [
        "| pairs | run | wall s | waiting for Moodle s | own work s | own work per pair ms "
        "| Moodle requests | Postgres transactions | baseline s | own work / baseline |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    per_pair: dict[int, float] = {}
    for learners in POINTS:
        with database() as db_url, sandbox_with_state() as (base, state):
            course = _seed(base, state, learners)
            tenant = lms.Tenant(
                id=SITE, name=SITE, moodle_url=f"{base}/moodle/{SITE}", token_ref=TOKEN_REF,
                time_zone="Europe/Berlin", holiday_country="DE", holiday_subdivision="BE",
                course_ids=[course], mode="live", sender="followup@example.com",
            )  # fmt: skip
            with psycopg.connect(db_url, autocommit=True) as conn:
                conn.execute("SET search_path = followup")
                lms.save_tenant(conn, tenant)
            pairs = learners * QUIZZES
            first = _sync(db_url, base, tenant, START, whole=True)
            quiet = _sync(db_url, base, tenant, START + timedelta(minutes=15), whole=False)
            base_s = _baseline(db_url, max(first["planned"], 1))
            per_pair[pairs] = quiet["own"] / pairs
            for name, r in (("first", first), ("quiet", quiet)):
                lines.append(
                    f"| {pairs:,} | {name} | {r['wall']:.2f} | {r['moodle']:.2f} "
                    f"| {r['own']:.2f} | {r['own'] / pairs * 1000:.3f} | {r['requests']:,} "
                    f"| {r['transactions']:,} | {base_s:.3f} | {r['own'] / base_s:.1f} |"
                )
    large, small = sorted(per_pair, reverse=True)[:2]
    lines += [
        "",
        f"Quiet run, own work per pair at {large:,} pairs against {small:,}: "
        f"{per_pair[large] / per_pair[small]:.2f}×. The first run's requests are one completion "
        "call a learner, the learners' profiles (100 a call), the quizzes and the listing.",
        "",
    ]
    return lines
