"""The demo's learning-reminder tenants: on the sandbox, its two Moodle sites (Berlin by e-mail,
New York by Moodle's message), live, seeded once by ``followup dev``: each course certified by an
Accredible group of the sandbox, and two pages of content in it: one approved and due now (the
first run publishes it), one not approved yet (it waits in ``followup lms queue`` for its
owner)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from followup_pipeline.settings import Settings
from followup_pipeline.store import lms, lms_content
from followup_pipeline.store.db import connect

#: The sandbox's two Moodle sites as the demo's tenants: (site, zone, calendar, channel, the
#: Accredible group that certifies its course).
DemoTenant = tuple[str, str, str, tuple[str, str], str, int, str]
DEMO_TENANTS: tuple[DemoTenant, ...] = (
    ("academy-berlin", "Akademie Berlin", "Europe/Berlin", ("DE", "BE"), "email", 9549, "de"),
    ("academy-newyork", "New York Academy", "America/New_York", ("US", "NY"), "moodle", 9550, "en"),
)


def seed_demo_tenants(url: str, settings: Settings) -> str:
    """On the sandbox, the demo's two tenants (once: tenants an operator has are left alone),
    live, on the sandbox's Moodle sites and their courses."""
    base = f"http://127.0.0.1:{settings.sandbox_port}"
    with connect(url, autocommit=True) as conn:
        if lms.tenants(conn):
            return "learning reminders: the tenants as they are (followup lms tenants)"
        for row in DEMO_TENANTS:
            site = row[0]
            world = httpx.get(f"{base}/_sandbox/moodle/{site}", timeout=10).json()
            courses = [int(c["id"]) for c in world.get("courses", [])]
            owner = settings.ops_owner or "academy-owner@example.com"
            tenant = demo_tenant(row, base, settings.graph_sender, owner, courses, courses)
            with conn.transaction():
                lms.save_tenant(conn, tenant)
            for course in courses[:1]:
                _demo_content(conn, base, site, course)
    return "learning reminders: the demo's two tenants (Berlin by e-mail, New York in Moodle)"


def demo_tenant(
    row: DemoTenant,
    base: str,
    sender: str | None,
    owner: str,
    courses: list[int],
    certified: list[int],
) -> lms.Tenant:
    """A demo academy of ``DEMO_TENANTS`` as a live tenant on the sandbox at ``base``: its
    ``courses``, the ``certified`` ones certified by its Accredible group."""
    site, name, zone, (country, region), channel, group, language = row
    ref = site.upper().replace("-", "_")
    return lms.Tenant(
        id=site,
        name=name,
        moodle_url=f"{base}/moodle/{site}",
        token_ref=ref,
        time_zone=zone,
        holiday_country=country,
        holiday_subdivision=region,
        channel=channel,
        sender=sender,
        course_ids=courses,
        mode="live",
        owner=owner,
        credential_token_ref=f"{ref}_CREDENTIALS",
        credential_groups={str(course): group for course in certified},
        language=language,
    )


def _demo_content(conn: Any, base: str, site: str, course: int) -> None:
    """Two hidden pages of the course: week 1 approved and due now, week 2 not approved."""
    now = datetime.now(UTC)
    for content, title, approved in (("week-1", "Week 1 handout", True),
                                     ("week-2", "Week 2 handout", False)):  # fmt: skip
        made = httpx.post(
            f"{base}/_sandbox/moodle/{site}/modules",
            json={"course": course, "name": title},
            timeout=10,
        ).json()["modules"][0]
        version = lms_content.ContentVersion(
            tenant_id=site, content_id=content, version=1, title=title, course_id=course,
            cmid=int(made["id"]), publish_at=now - timedelta(hours=1),
        )  # fmt: skip
        with conn.transaction():
            lms_content.save(conn, version)
            if approved:
                lms_content.approve(conn, site, content, 1, by="the demo", at=now)
