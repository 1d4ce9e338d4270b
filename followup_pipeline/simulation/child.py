"""One run of a job in a process of its own, for the simulation's real kills:
``python -m followup_pipeline.simulation.child '{"job": …, "now": …, "partition": …}'``.

The settings come from the environment the simulation gave the process; the run's clock stands
at ``now``. Its exit status says whether the run succeeded (it is usually killed first).
"""

from __future__ import annotations

import json
import sys

import dagster as dg

from followup_pipeline.defs import build_definitions
from followup_pipeline.resources import ClockResource
from followup_pipeline.settings import load_settings
from followup_pipeline.simulation.world import QUIET


def main(argv: list[str]) -> int:
    args = json.loads(argv[0])
    job = build_definitions(load_settings(env_file=False)).resolve_job_def(str(args["job"]))
    result = job.execute_in_process(
        instance=dg.DagsterInstance.ephemeral(),
        resources={"clock": ClockResource(start=str(args["now"]), ticking=False)},
        partition_key=args.get("partition"),
        run_config=QUIET,
        raise_on_error=False,
    )
    return 0 if result.success else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
