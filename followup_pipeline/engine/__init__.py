"""What every pipeline stands on, besides ``domain``, ``store`` and ``integrations``.

- ``scope``: the frozen run scope (now, run id, log) and the tally of counts and problems.
- ``effects``: the one way every outbound action goes out (a task, a mail, an alert, a CRM
  write, a reminder, a certificate, a publication); a sender supplies only its vendor's part.
- ``ledger``: the action ledger's service under it: one row per outbound effect, its attempts,
  its outcome.
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

A capability (``defs/<name>/``) imports this package, never another capability, and never the
ledger's tables (``store/ledger.py``): only the engine writes them.
"""
