"""What ``/metrics`` shows an operator, read from the tables at each scrape (``operator_gauges``,
docs/operations.md, Metrics)."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Series:
    """A row of ``operator_gauges``: a series of /metrics, its label's value, its value."""

    name: str
    label: str
    value: float
