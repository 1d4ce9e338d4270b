"""``python -m benchmarks`` (``make bench``): run every benchmark, write docs/benchmarks.md."""

from __future__ import annotations

import platform
from datetime import UTC, datetime
from pathlib import Path

from benchmarks import calendar, evaluate, ingress, ingress_profile, latency, lms, load, scale

OUT = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def main() -> None:
    """Run, print and write the table of every benchmark."""
    sections = {
        "evaluate: hourly cost per watch, in CRM round trips": evaluate.run(),
        "ingress: store then acknowledge, per request over HTTP": ingress.run(),
        "calendar: business-day arithmetic against plain date arithmetic": calendar.run(),
    }
    lines = [
        "# Benchmarks",
        "",
        "Ratios against a baseline measured in the same run (`make bench`). Seconds are medians",
        f"and depend on the machine: {platform.machine()}, Python {platform.python_version()},",
        f"measured {datetime.now(UTC):%Y-%m-%d}.",
        "",
    ]
    lines += [
        "## ingress under load: unique signed webhooks a second (wrk), against Python and pgbench",
        "",
        *load.run(),
        "## ingress: where one delivery's time goes, stage by stage",
        "",
        *ingress_profile.run(),
        "## evaluate at scale: a whole run's wall time and CRM requests by open watches",
        "",
        "The sandbox in its own process holds one deal per watch; watches seeded with SQL, none",
        "due. Every run lists every deal in a watched stage (keyset pages of 200) and reads the",
        "activity since its cursor. Nothing changed: the last run was an hour before. 1 % changed:",
        "half of those deals moved to the lost stage, half got an e-mail. Requests are the",
        "sandbox's count of EspoCRM API calls; listing pages, those of the deals alone.",
        "",
        *scale.run(),
        "## register: 10,000 stage-change items that need the CRM, one `register` run",
        "",
        *scale.register_run(),
        "## learning reminders at scale: one tenant's sync, the day's first and a quiet one",
        "",
        *lms.run(),
        "## webhook to watch through the real daemon (`followup dev`)",
        "",
        *latency.run(),
    ]
    for title, rows in sections.items():
        lines += [
            f"## {title}",
            "",
            "| benchmark | seconds | ratio to baseline |",
            "|---|---:|---:|",
        ]
        lines += [f"| {r['benchmark']} | {r['seconds']:.6f} | {r['ratio']:.2f} |" for r in rows]
        lines.append("")
    OUT.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
