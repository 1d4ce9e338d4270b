-- The watchdog, a process outside the Dagster daemon, alerts when the daemon, a schedule's tick
-- or a sensor stalls, and once more when it is healed (commands/watchdog.py).
ALTER TABLE alerts DROP CONSTRAINT alerts_kind_valid;
ALTER TABLE alerts ADD CONSTRAINT alerts_kind_valid
    CHECK (kind IN ('run_failure', 'dead_letter', 'pending_events', 'stale_evaluate', 'catch_up',
                    'degraded', 'recovered', 'watchdog', 'healed'));
