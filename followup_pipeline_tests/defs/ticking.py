"""A code location for the daemon tests: the machine's definitions, with ``evaluate``'s schedule
and the nightly purge and backup on a test-only cron (every minute), so a test sees unattended
ticks without waiting for the next business hour or night. Everything else is the machine's own,
default states included."""

import dagster as dg

from followup_pipeline.defs import CAPABILITIES, build_resources, evaluate, housekeeping
from followup_pipeline.settings import load_settings

settings = load_settings()
defs = dg.Definitions.merge(
    *(
        capability.build_defs(settings)
        for capability in CAPABILITIES
        if capability not in (evaluate, housekeeping)
    ),
    evaluate.build_defs(settings, cron="* * * * *"),
    housekeeping.build_defs(settings, cron="* * * * *"),
    dg.Definitions(resources=build_resources(settings)),
)
