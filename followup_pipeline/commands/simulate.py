"""``followup simulate --days N --deals M --seed S [--chaos]``: the whole machine over N simulated
business days (``simulation/``), then its invariants as a table; exit 1 when one fails."""

from __future__ import annotations

import argparse
import logging
import signal
from types import FrameType
from typing import Any

from followup_pipeline.settings import Settings
from followup_pipeline.simulation.runner import Options, Outcome, Simulation


def _row(cells: list[str], widths: list[int]) -> str:
    return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table, its columns padded (readable on a console and in docs/)."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return [_row(header, widths), rule, *(_row(r, widths) for r in rows)]


def summary(outcome: Outcome) -> list[str]:
    """The invariants, the faults by kind, the runs and the world, as text."""
    o = outcome.options
    days = outcome.seconds_per_day
    per_day = sum(days) / len(days) if days else 0.0
    lines = [
        f"simulated {o.days} business days, {o.deals} deals, seed {o.seed},"
        f" chaos {'on' if o.chaos else 'off'}: {outcome.seconds:.0f} s"
        f" ({per_day:.1f} s a simulated day)",
        "",
    ]
    rows = [
        [i.name, "holds" if i.holds else "FAILS", str(i.checked), "; ".join(i.broken) or "-"]
        for i in outcome.invariants
    ]
    lines += table(["invariant", "result", "checked", "broken"], rows)
    lines.append("")
    faults = [[name, str(outcome.injected[name]), str(outcome.hit[name])]
              for name in sorted(outcome.injected)]  # fmt: skip
    lines += table(["fault", "injected", "hit"], faults or [["none", "0", "0"]])
    lines.append("")
    runs = [
        [job, str(n), str(outcome.failed_runs[job]), f"{outcome.job_seconds.get(job, 0.0):.0f}"]
        for job, n in sorted(outcome.runs.items())
    ]
    lines += table(["job", "runs", "failed", "seconds"], runs)
    for error in outcome.child_errors:
        lines.append(f"a run meant to be killed failed on its own: {error}")
    if outcome.backfilled:
        lines.append(f"backfilled by the analyst: {', '.join(outcome.backfilled)}")
    lines.append("")
    world = [[what, str(n)] for what, n in sorted(outcome.world.items())]
    lines += table(["the world", "count"], world)
    lines.append("")
    if outcome.vacuous:
        lines.append(f"checked nothing, so shown nothing: {', '.join(outcome.vacuous)}")
    lines.append("every invariant holds" if outcome.holds else "AN INVARIANT FAILS")
    return lines


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def _interrupted(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # the world is taken down on the way out (its Postgres, its servers)


def _simulate(args: argparse.Namespace, settings: Settings) -> int:
    # Each run's own lines would drown the table: runs are counted, failures summed up.
    for name in ("dagster", "followup_pipeline", "psycopg.pool"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    options = Options(
        days=args.days,
        deals=args.deals,
        seed=args.seed,
        chaos=args.chaos,
        outage=not args.no_outage,
        database_url=args.database_url,
    )
    # A stopped simulation has no verdict: SIGTERM must not end it as a success (exit 0).
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        outcome = Simulation(options, progress=print).run()
    except KeyboardInterrupt:
        print("interrupted: no verdict")
        return 130
    print("\n".join(summary(outcome)))
    return 0 if outcome.holds else 1


def register(commands: Any) -> None:
    """Add ``simulate``."""
    sim = commands.add_parser(
        "simulate",
        help="run the whole machine over simulated business days (chaos optional) and check it",
        description="The whole machine (a Postgres of its own, the sandbox, the ingress, every "
        "pipeline's jobs) over N simulated business days from Monday 2 March 2026, then its "
        "invariants as a table. Exit 0: every invariant holds (each checked something); 1: one "
        "fails; 130: stopped. Some 15-40 s a simulated day. docs/reliability.md has the details.",
    )
    sim.add_argument("--days", type=_positive, default=5, help="business days to simulate (5)")
    sim.add_argument("--deals", type=_positive, default=30, help="deals in all (30)")
    sim.add_argument("--seed", type=int, default=1, help="the seed of the world and its chaos (1)")
    sim.add_argument("--chaos", action="store_true", help="faults, killed runs, an outage")
    sim.add_argument(
        "--no-outage", action="store_true", help="with --chaos: Postgres stays up throughout"
    )
    sim.add_argument(
        "--database-url",
        help="an empty database to use (default: an embedded Postgres of the simulation's own,"
        " which the outage stops and starts; with a URL there is no outage)",
    )
    sim.set_defaults(handler=_simulate)
