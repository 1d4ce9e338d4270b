-- 0006: claims are leases, so no row lock is held while the CRM is asked; and a per-deal mark of
-- the newest event applied, so an older event that arrives (or is replayed) later changes nothing.
ALTER TABLE events ADD COLUMN claimed_until timestamptz;
ALTER TABLE events ADD COLUMN claimed_by text;

CREATE TABLE deal_marks (
    subject_type      text NOT NULL DEFAULT 'Opportunity',
    subject_id        text NOT NULL,
    last_event_id     bigint NOT NULL REFERENCES events (id),
    last_received_at  timestamptz NOT NULL,
    PRIMARY KEY (subject_type, subject_id)
);
