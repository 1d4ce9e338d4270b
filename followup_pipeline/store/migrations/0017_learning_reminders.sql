-- 0017: learning reminders, part 1 (docs/architecture.md §10): tenants (an academy's Moodle site
-- with its zone, calendar, sender and plan), what each learner was assigned, and a durable record
-- per reminder. The reminder's sends are ledger actions under the record's key (their attempts,
-- outcomes and the provider's id), so the record holds the decision and the outcome it came to.

CREATE TABLE tenants (
    id                  text PRIMARY KEY CONSTRAINT tenants_id_valid
                        CHECK (id ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
    name                text NOT NULL,
    moodle_url          text NOT NULL,
    -- The name of the tenant's Moodle token in FOLLOWUP_LMS_TOKENS (a secret, never in this
    -- table).
    token_ref           text NOT NULL CONSTRAINT tenants_token_ref_valid
                        CHECK (token_ref ~ '^[A-Z][A-Z0-9_]{0,99}$'),
    time_zone           text NOT NULL,
    holiday_country     text NOT NULL DEFAULT 'DE',
    holiday_subdivision text,
    -- E-mail through Outlook from this mailbox, or Moodle's own message.
    channel             text NOT NULL DEFAULT 'email'
                        CONSTRAINT tenants_channel_valid CHECK (channel IN ('email', 'moodle')),
    sender              text,
    course_ids          bigint[] NOT NULL DEFAULT '{}',
    -- The plan: days before the due day, the due day, business days after it, at a local time.
    before_days         integer NOT NULL DEFAULT 2 CHECK (before_days BETWEEN 0 AND 30),
    after_business_days integer NOT NULL DEFAULT 3 CHECK (after_business_days BETWEEN 1 AND 30),
    remind_at           time NOT NULL DEFAULT '09:00',
    hours_start         integer NOT NULL DEFAULT 8 CHECK (hours_start BETWEEN 0 AND 23),
    hours_end           integer NOT NULL DEFAULT 18 CHECK (hours_end BETWEEN 1 AND 24),
    -- off: nothing; dry: everything but the send (recorded suppressed, reason dry_run); live.
    mode                text NOT NULL DEFAULT 'dry'
                        CONSTRAINT tenants_mode_valid CHECK (mode IN ('off', 'dry', 'live')),
    owner               text,
    backup              text,
    synced_at           timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT tenants_hours_valid CHECK (hours_start < hours_end),
    CONSTRAINT tenants_email_has_sender CHECK (channel <> 'email' OR sender IS NOT NULL)
);

-- A quiz assigned to a learner, as the last sync read it.
CREATE TABLE lms_assignments (
    tenant_id                 text NOT NULL REFERENCES tenants (id),
    learner_id                bigint NOT NULL,
    quiz_id                   bigint NOT NULL,
    course_id                 bigint NOT NULL,
    coursemodule              bigint NOT NULL,
    learner_name              text,
    learner_email             text,
    quiz_name                 text NOT NULL,
    due_at                    timestamptz,
    completed_at              timestamptz,
    synced_at                 timestamptz NOT NULL,
    last_successful_action_at timestamptz,
    PRIMARY KEY (tenant_id, learner_id, quiz_id)
);

-- One reminder: a fixed local time of the tenant's zone, stored as its UTC instant and the zone's
-- name, keyed `lms:{tenant}:{learner}:{quiz}:{action_type}:{local day}`.
CREATE TABLE lms_reminders (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id        text NOT NULL,
    learner_id       bigint NOT NULL,
    assignment_id    bigint NOT NULL,
    action_type      text NOT NULL CONSTRAINT lms_reminders_action_type_valid
                     CHECK (action_type IN ('before_due', 'due_day', 'overdue')),
    due_at           timestamptz NOT NULL,
    time_zone        text NOT NULL,
    local_day        date NOT NULL,
    idempotency_key  text NOT NULL CONSTRAINT lms_reminders_key_unique UNIQUE,
    delivery_outcome text NOT NULL DEFAULT 'planned' CONSTRAINT lms_reminders_outcome_valid
                     CHECK (delivery_outcome IN ('planned', 'attempted', 'accepted', 'confirmed',
                                                 'suppressed', 'failed', 'unknown')),
    reason           text,
    settled_at       timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (tenant_id, learner_id, assignment_id)
        REFERENCES lms_assignments (tenant_id, learner_id, quiz_id),
    CONSTRAINT lms_reminders_suppressed_has_reason
        CHECK ((delivery_outcome = 'suppressed') = (reason IS NOT NULL))
);
CREATE INDEX lms_reminders_open ON lms_reminders (tenant_id, due_at)
    WHERE delivery_outcome IN ('planned', 'attempted', 'failed', 'unknown');

-- Learners who asked for no more reminders (all, or of one type), as the academy recorded it.
CREATE TABLE lms_opt_outs (
    tenant_id   text NOT NULL REFERENCES tenants (id),
    learner_id  bigint NOT NULL,
    action_type text NOT NULL DEFAULT 'all',
    opted_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, learner_id, action_type)
);

ALTER TABLE actions DROP CONSTRAINT actions_kind_valid;
ALTER TABLE actions ADD CONSTRAINT actions_kind_valid
    CHECK (kind IN ('task', 'close_task', 'task_update', 'report', 'alert', 'crm_lead',
                    'reminder'));
ALTER TABLE actions DROP CONSTRAINT actions_reason_valid;
ALTER TABLE actions ADD CONSTRAINT actions_reason_valid
    CHECK (reason IN ('deal_closed', 'superseded', 'paused', 'dry_run', 'nothing_due', 'shadow',
                      'completed', 'opted_out', 'expired'));
