"""What every pipeline stands on, besides ``domain``, ``store`` and ``integrations``.

- ``scope``: the frozen run scope (now, run id, log) and the tally of counts and problems.
- ``ledger``: the action ledger service: one row per outbound effect, its attempts, its outcome.
- ``mailer``: mail through Graph at most once per ledger key (reports and alerts).
- ``worker``: the event worker: claims, per-item completions, backoff, dead letters, replay.
- ``run_stops``: the database errors that stop a worker's run, by SQLSTATE class, charging the
  event nothing.
- ``event_sensor``: the sensor tick that launches a pipeline's job when its sources' events are
  due.
- ``reaper``: the ``dead_runs`` sensor's tick: fail a run whose database session (its presence)
  is gone, as its process is.
- ``runs``: what a Dagster run of any pipeline reports (outcome tag, counts) and the business
  day of a schedule's tick.

A capability (``defs/<name>/``) imports this package, never another capability.
"""
