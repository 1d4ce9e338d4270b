-- The census of the watched stages (docs/architecture.md §13). Per day of the team's zone and
-- watched stage, how many deals the CRM listed in it (its latest reading that day), and each
-- entry of a deal into a stage while it is followed (a watch opened in it, or an open watch's
-- deal moved to it: recorded by the statements that open or change a watch, at the run's own
-- moment). A watched stage that goes quiet while it had deals, or while deals keep entering
-- the others, raises an alert (kind 'census').
CREATE TABLE stage_census (
    day          date NOT NULL,
    stage        text NOT NULL,
    listed       integer NOT NULL CHECK (listed >= 0),
    recorded_at  timestamptz NOT NULL,
    PRIMARY KEY (day, stage)
);
CREATE TABLE stage_entries (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    watch_id    bigint NOT NULL REFERENCES watches (id) ON DELETE CASCADE,
    stage       text NOT NULL,
    entered_at  timestamptz NOT NULL
);
CREATE INDEX stage_entries_entered_at ON stage_entries (entered_at);
-- The watches open now, each as entering its stage when it was opened.
INSERT INTO stage_entries (watch_id, stage, entered_at)
SELECT id, stage, registered_at FROM watches WHERE closed_at IS NULL;

ALTER TABLE alerts DROP CONSTRAINT alerts_kind_valid;
ALTER TABLE alerts ADD CONSTRAINT alerts_kind_valid
    CHECK (kind IN ('run_failure', 'dead_letter', 'pending_events', 'stale_evaluate', 'catch_up',
                    'degraded', 'recovered', 'watchdog', 'healed', 'census'));
