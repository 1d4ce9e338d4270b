"""The ingress's counters and latency histogram, rendered in Prometheus' text format.

One ingress serves from several worker processes (``followup ingress --workers N``): their
counters are kept with ``prometheus_client``'s multiprocess mode, each worker writing its own
memory-mapped files in ``PROMETHEUS_MULTIPROC_DIR`` (set by ``followup ingress`` before the
workers start), and every scrape sums them, whichever worker answers it. Without that variable
(one process, the tests) the counters live in the process. The event log's gauges (dead letters,
oldest pending event) are read from the database at each scrape.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

#: Upper bounds (seconds) of the latency histogram's buckets.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
PREFIX = "followup_ingress"
#: Where the workers of one ingress keep their counters (``prometheus_client``'s name).
MULTIPROCESS_DIR = "PROMETHEUS_MULTIPROC_DIR"

# The `_created` timestamp series mean nothing to an operator and differ between workers.
prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]


def _number(value: float) -> str:
    return repr(float(value)) if value != int(value) else str(int(value))


class Metrics:
    """The counters of one ingress (all its workers in multiprocess mode)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.received = Counter(
            f"{PREFIX}_received",
            "Deliveries stored as new events.",
            ["source"],
            registry=self.registry,
        )
        self.duplicates = Counter(
            f"{PREFIX}_duplicates",
            "Redeliveries counted, not stored.",
            ["source"],
            registry=self.registry,
        )
        self.rejected = Counter(
            f"{PREFIX}_rejected",
            "Deliveries refused, by reason.",
            ["reason"],
            registry=self.registry,
        )
        self.latency = Histogram(
            f"{PREFIX}_request_duration_seconds",
            "Time from a webhook's arrival to its answer.",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )

    def count_received(self, source: str) -> None:
        """A delivery was stored (a new event)."""
        self.received.labels(source).inc()

    def count_duplicate(self, source: str) -> None:
        """A delivery was a redelivery of a stored event."""
        self.duplicates.labels(source).inc()

    def count_rejected(self, reason: str) -> None:
        """A delivery was refused (401, 413, 400, 503, ...) for ``reason``."""
        self.rejected.labels(reason=reason).inc()

    def observe(self, seconds: float) -> None:
        """The time one webhook request took, from its arrival to its answer."""
        self.latency.observe(seconds)

    def render(self, gauges: Mapping[str, float] | None) -> str:
        """The Prometheus text exposition; ``gauges`` None when the database cannot be read."""
        folder = os.environ.get(MULTIPROCESS_DIR)
        if folder:
            registry = CollectorRegistry()
            MultiProcessCollector(registry, path=folder)  # type: ignore[no-untyped-call]
            text = generate_latest(registry).decode()
        else:
            text = generate_latest(self.registry).decode()
        lines = text.rstrip("\n").splitlines()

        def family(name: str, kind: str, help_text: str) -> None:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")

        family("followup_database_up", "gauge", "1 when the event log could be read.")
        lines.append(f"followup_database_up {0 if gauges is None else 1}")
        if gauges is not None:
            family("followup_events_dead", "gauge", "Dead-lettered events.")
            lines.append(f"followup_events_dead {_number(gauges['dead'])}")
            family("followup_events_pending", "gauge", "Events waiting for a register run.")
            lines.append(f"followup_events_pending {_number(gauges['pending'])}")
            family(
                "followup_events_oldest_pending_age_seconds",
                "gauge",
                "Age of the oldest pending event (0 when none).",
            )
            lines.append(
                f"followup_events_oldest_pending_age_seconds {gauges['oldest_pending_s']!r}"
            )
            family("followup_review_items_open", "gauge", "Model answers waiting for a review.")
            lines.append(f"followup_review_items_open {_number(gauges['review_open'])}")
            tenants = sorted(key for key in gauges if key.startswith("lms|"))
            if tenants:
                family(
                    "followup_lms_reminders",
                    "gauge",
                    "Learning reminders per tenant: overdue (due, not settled), failures, "
                    "superseded, opted_out, completed, expired, sent, confirmed; queued (open "
                    "in the catch-up queue).",
                )
            for key in tenants:
                _, tenant, state = key.split("|")
                line = f'followup_lms_reminders{{tenant="{tenant}",state="{state}"}}'
                lines.append(f"{line} {_number(gauges[key])}")
            lines.extend(_operator_lines(gauges))
            lines.extend(_work_lines(gauges))
            lines.extend(_account_lines(gauges))
        return "\n".join(lines) + "\n"


#: The operator's series (``operator_gauges``): name, type, help, and the label a row's label
#: fills (none: no label).
OPERATOR_SERIES = (
    ("steps_overdue", "followup_steps_overdue", None,
     "Follow-up steps of open, unpaused watches due before today and neither fired nor skipped."),
    ("actions", "followup_actions", "state",
     "Ledger actions waiting in the in-flight window (in_flight) or dead (failed, no attempt "
     "left)."),
    ("alerts_unsent", "followup_alerts_unsent", None,
     "Alerts that reached nobody yet (neither their mail nor their ClickUp task)."),
    ("evaluate_age", "followup_evaluate_last_finished_age_seconds", None,
     "Seconds since an evaluate run last finished without a problem (absent: none ever did)."),
    ("watches_open", "followup_watches_open", "stage", "Open watches by the deal's stage."),
)  # fmt: skip


def _operator_lines(gauges: Mapping[str, float]) -> list[str]:
    """The operator's series, as Prometheus lines."""
    lines: list[str] = []
    for name, metric, label, help_text in OPERATOR_SERIES:
        rows = sorted((k, v) for k, v in gauges.items() if k.startswith(f"op|{name}|"))
        lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} gauge"]
        for key, value in rows:
            labelled = key.split("|", 2)[2].replace("\\", "\\\\").replace('"', '\\"')
            where = f'{{{label}="{labelled}"}}' if label else ""
            lines.append(f"{metric}{where} {_number(value)}")
    return lines


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")


def _work_lines(gauges: Mapping[str, float]) -> list[str]:
    """The list of work waiting for a person: open and acknowledged items in all (always
    there, 0 when none: an alert rule on them clears), and by pipeline, kind and owner."""
    lines = [
        "# HELP followup_work_items Items of the work list waiting for a person, by state "
        "(open: nobody acknowledged it yet).",
        "# TYPE followup_work_items gauge",
    ]
    rows = sorted((k.split("|", 4), v) for k, v in gauges.items() if k.startswith("work|"))
    for state in ("open", "acknowledged"):
        total = sum(v for parts, v in rows if parts[1] == state)
        lines.append(f'followup_work_items{{state="{state}"}} {_number(total)}')
    for state, metric in (("open", "followup_work_open"),
                          ("acknowledged", "followup_work_acknowledged")):  # fmt: skip
        lines += [
            f"# HELP {metric} Work-list items {state}, by pipeline, kind and owner.",
            f"# TYPE {metric} gauge",
        ]
        for parts, value in rows:
            if parts[1] != state:
                continue
            _, _, pipeline, kind, owner = parts
            where = f'pipeline="{pipeline}",kind="{kind}",owner="{_label(owner)}"'
            lines.append(f"{metric}{{{where}}} {_number(value)}")
    return lines


def _account_lines(gauges: Mapping[str, float]) -> list[str]:
    """The account of the last seven days' due actions (``followup account``): how many of each
    pipeline's kind ended each way, and how many are unaccounted (always there: 0 is the
    promise, so an alert rule on it clears)."""
    lines = [
        "# HELP followup_account Actions due in the last 7 days by pipeline, kind and how they "
        "ended (done, suppressed, waiting, in_flight, not_late, unaccounted).",
        "# TYPE followup_account gauge",
    ]
    for key, value in sorted(gauges.items()):
        if key.startswith("acct|"):
            _, pipeline, kind, ending = key.split("|", 3)
            where = f'pipeline="{pipeline}",kind="{kind}",ending="{ending}"'
            lines.append(f"followup_account{{{where}}} {_number(value)}")
    lines += [
        "# HELP followup_account_unaccounted Actions due in the last 7 days, past their grace, "
        "and neither done, suppressed, waiting with an owner nor in flight.",
        "# TYPE followup_account_unaccounted gauge",
        f"followup_account_unaccounted {_number(gauges.get('acct_unaccounted', 0.0))}",
    ]
    return lines
