"""``python -m benchmarks`` (``make bench``): run every benchmark, write docs/benchmarks.md."""

from __future__ import annotations

import platform
from datetime import UTC, datetime
from pathlib import Path

from benchmarks import calendar, evaluate, ingress, load

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
