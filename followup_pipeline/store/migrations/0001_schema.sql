-- 0001: the whole flow state of the machine, with its invariants held by the database itself.
-- All timestamps are UTC (timestamptz); local dates sit beside the name of their time zone.

-- Cadences: lists of business-day offsets counted from a plan's base date.
CREATE TABLE cadences (
    name        text PRIMARY KEY,
    offsets     integer[] NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT cadences_offsets_valid CHECK (
        cardinality(offsets) > 0 AND array_position(offsets, NULL) IS NULL AND offsets[1] >= 1
    )
);
INSERT INTO cadences (name, offsets) VALUES ('default', '{5,12,21}');

-- Local overrides of the business calendar: a day off the package does not know ('holiday'),
-- or a holiday the team works ('workday').
CREATE TABLE holidays (
    day         date PRIMARY KEY,
    kind        text NOT NULL CONSTRAINT holidays_kind_valid CHECK (kind IN ('holiday', 'workday')),
    name        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- The event log: one row per delivery that is not a duplicate, raw bytes kept.
CREATE TABLE events (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source             text NOT NULL,
    event_type         text,
    dedup_key          text NOT NULL,
    body               bytea NOT NULL,
    headers            jsonb NOT NULL DEFAULT '{}'::jsonb,
    received_at        timestamptz NOT NULL DEFAULT now(),
    status             text NOT NULL DEFAULT 'pending'
        CONSTRAINT events_status_valid
        CHECK (status IN ('pending', 'done', 'dead', 'unhandled')),
    attempts           integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at    timestamptz NOT NULL DEFAULT now(),
    last_error         text,
    dead_step          text,
    duplicate_count    integer NOT NULL DEFAULT 0 CHECK (duplicate_count >= 0),
    last_duplicate_at  timestamptz,
    processed_at       timestamptz
);
CREATE INDEX events_pending ON events (next_attempt_at) WHERE status = 'pending';
CREATE INDEX events_dedup ON events (dedup_key, received_at DESC);

-- Idempotency per item of an event: {event_id}:{item}:{step}.
CREATE TABLE step_completions (
    key           text PRIMARY KEY,
    event_id      bigint REFERENCES events (id),
    completed_at  timestamptz NOT NULL DEFAULT now(),
    result        jsonb
);

-- Watches: one per stay of a deal in a watched stage.
CREATE TABLE watches (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    subject_type      text NOT NULL DEFAULT 'Opportunity',
    subject_id        text NOT NULL,
    subject_name      text NOT NULL,
    account_name      text,
    assigned_user_id  text,
    stage             text NOT NULL,
    cadence_name      text NOT NULL REFERENCES cadences (name),
    offsets           integer[] NOT NULL,
    time_zone         text NOT NULL,
    base_on           date NOT NULL,
    registered_at     timestamptz NOT NULL,
    registered_by     text NOT NULL
        CONSTRAINT watches_registered_by_valid
        CHECK (registered_by IN ('webhook', 'reconcile', 'operator')),
    source_event_id   bigint REFERENCES events (id),
    last_reset_at     timestamptz,
    paused_at         timestamptz,
    closed_at         timestamptz,
    closed_reason     text
        CONSTRAINT watches_closed_reason_valid
        CHECK (closed_reason IN ('won', 'lost', 'exhausted', 'subject_gone', 'out_of_scope')),
    CONSTRAINT watches_closed_has_reason CHECK ((closed_at IS NULL) = (closed_reason IS NULL))
);
-- At most one open watch per deal.
CREATE UNIQUE INDEX watches_one_open ON watches (subject_type, subject_id) WHERE closed_at IS NULL;
CREATE INDEX watches_subject ON watches (subject_type, subject_id, registered_at DESC);

-- The planned steps of a watch.
CREATE TABLE watch_steps (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    watch_id     bigint NOT NULL REFERENCES watches (id) ON DELETE CASCADE,
    step_no      integer NOT NULL CHECK (step_no >= 1),
    offset_days  integer NOT NULL CHECK (offset_days >= 1),
    due_on       date NOT NULL,
    fired_at     timestamptz,
    task_ref     text,
    skipped_at   timestamptz,
    skip_reason  text
        CONSTRAINT watch_steps_skip_reason_valid
        CHECK (skip_reason IN ('deal_closed', 'superseded', 'paused')),
    CONSTRAINT watch_steps_unique_step UNIQUE (watch_id, step_no),
    CONSTRAINT watch_steps_fired_or_skipped CHECK (fired_at IS NULL OR skipped_at IS NULL),
    CONSTRAINT watch_steps_skipped_has_reason CHECK ((skipped_at IS NULL) = (skip_reason IS NULL)),
    CONSTRAINT watch_steps_fired_has_task CHECK ((fired_at IS NULL) = (task_ref IS NULL))
);
CREATE INDEX watch_steps_due ON watch_steps (due_on) WHERE fired_at IS NULL AND skipped_at IS NULL;

-- The action ledger: every outbound effect (task, closing a task, report, alert).
CREATE TABLE actions (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    idempotency_key  text NOT NULL CONSTRAINT actions_key_unique UNIQUE,
    kind             text NOT NULL
        CONSTRAINT actions_kind_valid CHECK (kind IN ('task', 'close_task', 'report', 'alert')),
    watch_id         bigint REFERENCES watches (id),
    step_no          integer,
    due_at           timestamptz NOT NULL,
    time_zone        text NOT NULL,
    outcome          text NOT NULL
        CONSTRAINT actions_outcome_valid
        CHECK (outcome IN ('attempted', 'accepted', 'confirmed', 'suppressed', 'failed', 'unknown')),
    reason           text
        CONSTRAINT actions_reason_valid
        CHECK (reason IN ('deal_closed', 'superseded', 'paused', 'dry_run')),
    provider_ref     text,
    payload          jsonb NOT NULL DEFAULT '{}'::jsonb,
    attempts         integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT actions_suppressed_has_reason CHECK ((outcome = 'suppressed') = (reason IS NOT NULL))
);
CREATE INDEX actions_open ON actions (outcome) WHERE outcome IN ('attempted', 'unknown', 'failed');

-- Every attempt at an action, kept.
CREATE TABLE action_attempts (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    action_id     bigint NOT NULL REFERENCES actions (id) ON DELETE CASCADE,
    attempt_no    integer NOT NULL CHECK (attempt_no >= 1),
    started_at    timestamptz NOT NULL,
    finished_at   timestamptz,
    outcome       text NOT NULL
        CONSTRAINT action_attempts_outcome_valid
        CHECK (outcome IN ('attempted', 'accepted', 'confirmed', 'suppressed', 'failed', 'unknown')),
    provider_ref  text,
    error         text,
    run_id        text,
    CONSTRAINT action_attempts_unique UNIQUE (action_id, attempt_no)
);

-- Two-line summaries of a deal's e-mails; the input hash makes unchanged e-mails cost no call.
CREATE TABLE enrichments (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    subject_type       text NOT NULL DEFAULT 'Opportunity',
    subject_id         text NOT NULL,
    input_hash         text NOT NULL,
    line1              text NOT NULL,
    line2              text NOT NULL,
    model              text NOT NULL,
    prompt_tokens      integer,
    completion_tokens  integer,
    created_at         timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT enrichments_unique_input UNIQUE (subject_type, subject_id, input_hash)
);

-- Model answers that were not what we asked for, kept raw for an operator.
CREATE TABLE review_items (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    subject_type  text NOT NULL DEFAULT 'Opportunity',
    subject_id    text NOT NULL,
    input_hash    text NOT NULL,
    model         text NOT NULL,
    raw_output    text NOT NULL,
    error         text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    resolved_at   timestamptz
);
CREATE INDEX review_items_open ON review_items (created_at) WHERE resolved_at IS NULL;

-- Run failures and their alerts; repeats of a fingerprint within a window are counted, not sent.
CREATE TABLE alerts (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    fingerprint       text NOT NULL,
    job_name          text NOT NULL,
    run_id            text NOT NULL,
    message           text NOT NULL,
    occurred_at       timestamptz NOT NULL,
    sent              boolean NOT NULL DEFAULT false,
    action_key        text,
    CONSTRAINT alerts_unique_run UNIQUE (run_id)
);
CREATE INDEX alerts_fingerprint ON alerts (fingerprint, occurred_at DESC);
