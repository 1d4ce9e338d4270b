"""The learning reminders' test world: the sandbox's two Moodle sites (and their Accredible
accounts), a tenant on one of them, and one ``lms_reminders`` run inside Dagster on a real
Postgres at a given instant (one Dagster instance per test module: ``conftest.py``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import dagster as dg
import httpx
import psycopg

from followup_pipeline.defs import lms as capability
from followup_pipeline.integrations.resources import (
    AccredibleResource,
    MoodleResource,
    OutlookResource,
)
from followup_pipeline.resources import ClockResource, PostgresResource
from followup_pipeline.sandbox.config import SandboxConfig
from followup_pipeline.settings import load_settings
from followup_pipeline.store import lms

SANDBOX = SandboxConfig()
BERLIN, NEW_YORK = "academy-berlin", "academy-newyork"
TOKENS = {
    "ACADEMY_BERLIN": SANDBOX.moodle_tokens[BERLIN].get_secret_value(),
    "ACADEMY_NEWYORK": SANDBOX.moodle_tokens[NEW_YORK].get_secret_value(),
    "ACADEMY_BERLIN_CREDENTIALS": SANDBOX.accredible_keys[BERLIN].get_secret_value(),
    "ACADEMY_NEWYORK_CREDENTIALS": SANDBOX.accredible_keys[NEW_YORK].get_secret_value(),
}


#: One Dagster instance for the module's runs (making one costs about half a second a run).
SHARED: dict[str, dg.DagsterInstance] = {}


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def control(sandbox: str, method: str, path: str, body: Any = None) -> Any:
    response = httpx.request(method, f"{sandbox}/_sandbox{path}", json=body, timeout=10)
    response.raise_for_status()
    return response.json()


def seed_site(sandbox: str, site: str, closes: datetime, learners: int = 2) -> dict[str, Any]:
    """A course with ``learners`` learners and one quiz closing at ``closes``."""
    [course] = control(sandbox, "POST", f"/moodle/{site}/courses", {"fullname": "Onboarding"})[
        "courses"
    ]
    people = [
        {"firstname": f"Learner{n}", "lastname": "Test", "course": course["id"],
         "email": f"learner{n}@{site}.example"}
        for n in range(learners)
    ]  # fmt: skip
    users = control(sandbox, "POST", f"/moodle/{site}/users", people)["users"]
    [quiz] = control(sandbox, "POST", f"/moodle/{site}/quizzes",
                      {"course": course["id"], "name": "Safety quiz",
                       "timeclose": int(closes.timestamp())})["quizzes"]  # fmt: skip
    return {"course": course["id"], "users": [u["id"] for u in users], "quiz": quiz["id"]}


def make_tenant(
    db: psycopg.Connection[Any], sandbox: str, site: str, course: int, **values: Any
) -> lms.Tenant:
    zone = "Europe/Berlin" if site == BERLIN else "America/New_York"
    where = ("DE", "BE") if site == BERLIN else ("US", "NY")
    tenant = lms.Tenant(
        id=site,
        name=site,
        moodle_url=f"{sandbox}/moodle/{site}",
        token_ref="ACADEMY_BERLIN" if site == BERLIN else "ACADEMY_NEWYORK",
        time_zone=zone,
        holiday_country=where[0],
        holiday_subdivision=where[1],
        channel=values.pop("channel", "email"),
        sender="followup@example.com",
        course_ids=[course],
        mode=values.pop("mode", "live"),
        **values,
    )
    with db.transaction():
        lms.save_tenant(db, tenant)
    return tenant


def run_lms(
    db_url: str, sandbox: str, at: datetime, node: str = "remind_learners", **settings: Any
) -> dict[str, Any]:
    """One ``lms_reminders`` run at ``at``; the counts of its op ``node``."""
    resources = {
        "postgres": PostgresResource(url=db_url),
        "clock": ClockResource(start=at.isoformat(), ticking=False),
        "moodle": MoodleResource(tokens=json.dumps(TOKENS)),
        "accredible": AccredibleResource(
            base_url=f"{sandbox}/accredible", tokens=json.dumps(TOKENS)
        ),
        "outlook": OutlookResource(
            login_url=f"{sandbox}/login",
            graph_url=f"{sandbox}/graph",
            tenant_id=SANDBOX.graph_tenant_id,
            client_id=SANDBOX.graph_client_id,
            client_secret=SANDBOX.graph_client_secret.get_secret_value(),
            sender="followup@example.com",
        ),
    }
    built = capability.build_defs(load_settings(action_in_flight_s=0, **settings))
    job = dg.Definitions.merge(built, dg.Definitions(resources=resources)).resolve_job_def(
        "lms_reminders"
    )
    result = job.execute_in_process(instance=SHARED["instance"])
    counts: dict[str, Any] = result.output_for_node(node)
    return counts
