-- 0025: one list of work waiting for a person (docs/architecture.md §12). Dead events, dead
-- actions, invalid items and the learning reminders' catch-up queue become one table: each item
-- has its pipeline, kind, what it is, why, its raw data (the event or action it stands for, its
-- step, its last error), an owner and a backup, and a state: open, acknowledged (by whom, when),
-- closed (with how: replayed, resolved by itself, decided by a person with a reason, expired).
-- Today's catch-up queue moves here with its owners; `followup migrate` then brings in the dead
-- events, actions and invalid items (the sync reads the attempts budget from the settings).
CREATE TABLE work_items (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- What it stands for: event:<id>, event:<id>/<item key> (an invalid item), action:<key>.
    subject          text NOT NULL,
    pipeline         text NOT NULL CONSTRAINT work_items_pipeline_valid
                     CHECK (pipeline IN ('deal_followup', 'lead_intake', 'learning', 'operations')),
    kind             text NOT NULL CONSTRAINT work_items_kind_valid
                     CHECK (kind IN ('dead_event', 'dead_action', 'invalid_item', 'reminder',
                                     'certificate', 'publication')),
    tenant_id        text,
    what             text NOT NULL,
    reason           text NOT NULL,
    step             text,
    error            text,
    event_id         bigint,
    action_key       text,
    owner            text NOT NULL,
    backup           text,
    state            text NOT NULL DEFAULT 'open' CONSTRAINT work_items_state_valid
                     CHECK (state IN ('open', 'acknowledged', 'closed')),
    opened_at        timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    -- When it last failed, and how often: a death after a replay opens it again, as news.
    failed_at        timestamptz NOT NULL,
    failures         integer NOT NULL DEFAULT 1 CHECK (failures >= 1),
    -- How many of its failures were alerted: one alert each, none once it is closed.
    alerted          integer NOT NULL DEFAULT 0 CHECK (alerted >= 0),
    acknowledged_by  text,
    acknowledged_at  timestamptz,
    replays          integer NOT NULL DEFAULT 0 CHECK (replays >= 0),
    replayed_by      text,
    replayed_at      timestamptz,
    closed_at        timestamptz,
    closed_how       text CONSTRAINT work_items_closed_how_valid
                     CHECK (closed_how IN ('replayed', 'resolved', 'decided', 'expired')),
    closed_by        text,
    -- How it ended in words: the person's reason, or what resolved it ("sent: accepted").
    closed_note      text,
    CONSTRAINT work_items_closed_whole CHECK (
        (state = 'closed') = (closed_at IS NOT NULL) AND (closed_at IS NULL) = (closed_how IS NULL)),
    CONSTRAINT work_items_decided_by_someone CHECK (
        closed_how IS DISTINCT FROM 'decided' OR (closed_by IS NOT NULL AND closed_note IS NOT NULL)),
    CONSTRAINT work_items_ack_whole CHECK ((acknowledged_at IS NULL) = (acknowledged_by IS NULL))
);
CREATE UNIQUE INDEX work_items_one_open ON work_items (subject) WHERE state <> 'closed';
CREATE INDEX work_items_waiting ON work_items (pipeline, kind, owner) WHERE state <> 'closed';
CREATE INDEX work_items_subject ON work_items (subject, closed_at);

INSERT INTO work_items (subject, pipeline, kind, tenant_id, what, reason, action_key, owner,
                        backup, state, opened_at, updated_at, failed_at, alerted, closed_at,
                        closed_how, closed_note)
SELECT 'action:' || action_key, 'learning', kind, tenant_id, what, reason, action_key, owner,
       backup, CASE WHEN closed_at IS NULL THEN 'open' ELSE 'closed' END, queued_at, updated_at,
       queued_at, 1, closed_at,
       CASE WHEN closed_at IS NULL THEN NULL
            WHEN closed_how LIKE 'suppressed: expired%' THEN 'expired'
            ELSE 'resolved' END,
       closed_how
FROM lms_queue ORDER BY id;
DROP TABLE lms_queue;

-- A person closes a dead action with a reason: the ledger says it was suppressed, by a decision.
ALTER TABLE actions DROP CONSTRAINT actions_reason_valid;
ALTER TABLE actions ADD CONSTRAINT actions_reason_valid
    CHECK (reason IN ('deal_closed', 'superseded', 'paused', 'dry_run', 'nothing_due', 'shadow',
                      'completed', 'opted_out', 'expired', 'decided'));
