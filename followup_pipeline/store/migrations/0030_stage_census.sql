-- The census of the watched stages (docs/architecture.md §13): per day of the team's zone and
-- watched stage, how many deals the CRM listed in it (its latest reading that day) and how many
-- began their follow-up in it that day. A watched stage that goes quiet while it had deals, or
-- while deals keep entering the others, raises an alert (kind 'census').
CREATE TABLE stage_census (
    day          date NOT NULL,
    stage        text NOT NULL,
    listed       integer NOT NULL CHECK (listed >= 0),
    entered      integer NOT NULL CHECK (entered >= 0),
    recorded_at  timestamptz NOT NULL,
    PRIMARY KEY (day, stage)
);
CREATE INDEX watches_registered_at ON watches (registered_at);

ALTER TABLE alerts DROP CONSTRAINT alerts_kind_valid;
ALTER TABLE alerts ADD CONSTRAINT alerts_kind_valid
    CHECK (kind IN ('run_failure', 'dead_letter', 'pending_events', 'stale_evaluate', 'catch_up',
                    'degraded', 'recovered', 'watchdog', 'healed', 'census'));
