-- A job that keeps ending `partial` (a vendor away) raises an alert of its own, and one more when
-- a run of it ends clean again (defs/alerts/degraded.py).
ALTER TABLE alerts DROP CONSTRAINT alerts_kind_valid;
ALTER TABLE alerts ADD CONSTRAINT alerts_kind_valid
    CHECK (kind IN ('run_failure', 'dead_letter', 'pending_events', 'stale_evaluate', 'catch_up',
                    'degraded', 'recovered'));
