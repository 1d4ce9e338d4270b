-- name: record_run_failure
-- Keep one failed run (once per run id) with its fingerprint, for the alerting.
INSERT INTO alerts (fingerprint, job_name, run_id, message, occurred_at)
VALUES (%(fingerprint)s, %(job_name)s, %(run_id)s, %(message)s, %(occurred_at)s)
ON CONFLICT (run_id) DO NOTHING;
