"""The demo's learning-reminder tenants: on the sandbox, its two Moodle sites (Berlin by e-mail,
New York by Moodle's message), live, seeded once by ``followup dev``."""

from __future__ import annotations

import httpx

from followup_pipeline.settings import Settings
from followup_pipeline.store import lms
from followup_pipeline.store.db import connect

#: The sandbox's two Moodle sites as the demo's tenants: (site, zone, calendar, channel).
DEMO_TENANTS = (
    ("academy-berlin", "Akademie Berlin", "Europe/Berlin", ("DE", "BE"), "email"),
    ("academy-newyork", "New York Academy", "America/New_York", ("US", "NY"), "moodle"),
)


def seed_demo_tenants(url: str, settings: Settings) -> str:
    """On the sandbox, the demo's two tenants (once: tenants an operator has are left alone),
    live, on the sandbox's Moodle sites and their courses."""
    base = f"http://127.0.0.1:{settings.sandbox_port}"
    with connect(url, autocommit=True) as conn:
        if lms.tenants(conn):
            return "learning reminders: the tenants as they are (followup lms tenants)"
        for site, name, zone, (country, region), channel in DEMO_TENANTS:
            world = httpx.get(f"{base}/_sandbox/moodle/{site}", timeout=10).json()
            courses = [int(c["id"]) for c in world.get("courses", [])]
            tenant = lms.Tenant(
                id=site,
                name=name,
                moodle_url=f"{base}/moodle/{site}",
                token_ref=site.upper().replace("-", "_"),
                time_zone=zone,
                holiday_country=country,
                holiday_subdivision=region,
                channel=channel,
                sender=settings.graph_sender,
                course_ids=courses,
                mode="live",
                owner=settings.ops_owner or "academy-owner@example.com",
            )
            with conn.transaction():
                lms.save_tenant(conn, tenant)
    return "learning reminders: the demo's two tenants (Berlin by e-mail, New York in Moodle)"
