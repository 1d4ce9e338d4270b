-- 0008: alerts. One row per thing that raised an alert: a failed run, a dead letter, an event
-- pending too long, a business day without a successful evaluate. `source` says what raised it
-- (so a sensor that looks twice records it once); `fingerprint` says which rows are the same alert.
-- A row that goes out names the ledger action (`actions.idempotency_key`) of its mail in
-- `action_key`; a repeat within the window is held (`action_key` NULL) until the next alert of its
-- fingerprint counts it (`counted_in`, and that alert's `held`).
ALTER TABLE alerts RENAME TO alerts_0001;
ALTER INDEX alerts_fingerprint RENAME TO alerts_0001_fingerprint;
ALTER TABLE alerts_0001 RENAME CONSTRAINT alerts_pkey TO alerts_0001_pkey;
ALTER TABLE alerts_0001 RENAME CONSTRAINT alerts_unique_run TO alerts_0001_unique_run;

CREATE TABLE alerts (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind          text NOT NULL,
    source        text NOT NULL,
    fingerprint   text NOT NULL,
    subject       text NOT NULL,
    message       text NOT NULL,
    run_id        text,
    occurred_at   timestamptz NOT NULL,
    recorded_at   timestamptz NOT NULL DEFAULT now(),
    action_key    text,
    held          integer NOT NULL DEFAULT 0,
    counted_in    text,
    CONSTRAINT alerts_kind_valid
        CHECK (kind IN ('run_failure', 'dead_letter', 'pending_events', 'stale_evaluate')),
    CONSTRAINT alerts_unique_source UNIQUE (source)
);
CREATE INDEX alerts_fingerprint ON alerts (fingerprint, occurred_at DESC);
CREATE INDEX alerts_action_key ON alerts (action_key) WHERE action_key IS NOT NULL;

-- Failures recorded before alerts were sent stay on the record: never sent (too old now) and
-- never counted as held repeats by a new alert.
INSERT INTO alerts (kind, source, fingerprint, subject, message, run_id, occurred_at, counted_in)
SELECT 'run_failure', 'run:' || run_id, fingerprint, job_name, message, run_id, occurred_at,
       'known before alerting'
FROM alerts_0001 ORDER BY id;
DROP TABLE alerts_0001;
