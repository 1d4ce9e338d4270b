"""The ingress's counters and latency histogram, rendered in Prometheus' text format.

Counters live in the process (one ingress replica's view, as Prometheus expects); the event log's
gauges (dead letters, oldest pending event) are read from the database at each scrape, so every
replica reports the same truth about the log.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping

#: Upper bounds (seconds) of the latency histogram's buckets.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
PREFIX = "followup_ingress"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(**labels: str) -> str:
    inner = ",".join(f'{name}="{_escape(value)}"' for name, value in labels.items())
    return "{" + inner + "}" if inner else ""


def _number(value: float) -> str:
    return repr(float(value)) if value != int(value) else str(int(value))


class Metrics:
    """Thread-safe counters of one ingress process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.received: Counter[str] = Counter()
        self.duplicates: Counter[str] = Counter()
        self.rejected: Counter[str] = Counter()
        self._buckets = [0] * len(LATENCY_BUCKETS)
        self._latency_sum = 0.0
        self._latency_count = 0

    def count_received(self, source: str) -> None:
        """A delivery was stored (a new event)."""
        with self._lock:
            self.received[source] += 1

    def count_duplicate(self, source: str) -> None:
        """A delivery was a redelivery of a stored event."""
        with self._lock:
            self.duplicates[source] += 1

    def count_rejected(self, reason: str) -> None:
        """A delivery was refused (401, 413, 400, 503, ...) for ``reason``."""
        with self._lock:
            self.rejected[reason] += 1

    def observe(self, seconds: float) -> None:
        """The time one webhook request took, from its arrival to its answer."""
        with self._lock:
            self._latency_sum += seconds
            self._latency_count += 1
            for index, bound in enumerate(LATENCY_BUCKETS):
                if seconds <= bound:
                    self._buckets[index] += 1

    def render(self, gauges: Mapping[str, float] | None) -> str:
        """The Prometheus text exposition; ``gauges`` None when the database cannot be read."""
        lines: list[str] = []

        def family(name: str, kind: str, help_text: str) -> None:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")

        with self._lock:
            family(f"{PREFIX}_received_total", "counter", "Deliveries stored as new events.")
            for source, n in sorted(self.received.items()):
                lines.append(f"{PREFIX}_received_total{_labels(source=source)} {n}")
            family(f"{PREFIX}_duplicates_total", "counter", "Redeliveries counted, not stored.")
            for source, n in sorted(self.duplicates.items()):
                lines.append(f"{PREFIX}_duplicates_total{_labels(source=source)} {n}")
            family(f"{PREFIX}_rejected_total", "counter", "Deliveries refused, by reason.")
            for reason, n in sorted(self.rejected.items()):
                lines.append(f"{PREFIX}_rejected_total{_labels(reason=reason)} {n}")
            name = f"{PREFIX}_request_duration_seconds"
            family(name, "histogram", "Time from a webhook's arrival to its answer.")
            for bound, n in zip(LATENCY_BUCKETS, self._buckets, strict=True):
                lines.append(f"{name}_bucket{_labels(le=_number(bound))} {n}")
            lines.append(f'{name}_bucket{{le="+Inf"}} {self._latency_count}')
            lines.append(f"{name}_sum {self._latency_sum!r}")
            lines.append(f"{name}_count {self._latency_count}")
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
        return "\n".join(lines) + "\n"
