-- 0018: learning reminders, part 2 (docs/architecture.md §10): certificates reconciled with what
-- the credential platform confirms, content published only when approved and current, and a
-- catch-up queue in which every open action that can be neither done nor suppressed has a named
-- owner.

-- The credential platform's API key of a tenant (its name in FOLLOWUP_LMS_TOKENS, never the key),
-- and which credential group (the platform's course design) certifies each course: {"7": 12}.
ALTER TABLE tenants
    ADD COLUMN credential_token_ref text CONSTRAINT tenants_credential_token_ref_valid
        CHECK (credential_token_ref ~ '^[A-Z][A-Z0-9_]{0,99}$'),
    ADD COLUMN credential_groups jsonb NOT NULL DEFAULT '{}'
        CONSTRAINT tenants_credential_groups_valid CHECK (jsonb_typeof(credential_groups) = 'object'),
    ADD COLUMN certificates_checked_at timestamptz;

-- A learner who met a course's completion requirements (Moodle's completion state), and the
-- export of their certificate. `generation` counts exports: one the platform lost is issued again
-- under the next key (`lms-cert:{tenant}:{learner}:{course}:{generation}`).
CREATE TABLE lms_certificates (
    tenant_id       text NOT NULL REFERENCES tenants (id),
    learner_id      bigint NOT NULL,
    course_id       bigint NOT NULL,
    group_id        bigint NOT NULL,
    learner_name    text,
    learner_email   text,
    completed_at    timestamptz NOT NULL,
    generation      integer NOT NULL DEFAULT 1 CHECK (generation > 0),
    idempotency_key text NOT NULL CONSTRAINT lms_certificates_key_unique UNIQUE,
    -- missing: to be issued; issued: the platform answered; confirmed: read back there.
    state           text NOT NULL DEFAULT 'missing' CONSTRAINT lms_certificates_state_valid
                    CHECK (state IN ('missing', 'attempted', 'issued', 'confirmed', 'suppressed',
                                     'failed', 'unknown')),
    reason          text,
    credential_id   text,
    confirmed_at    timestamptz,
    lost_at         timestamptz,
    seen_at         timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, learner_id, course_id),
    CONSTRAINT lms_certificates_suppressed_has_reason
        CHECK ((state = 'suppressed') = (reason IS NOT NULL))
);

-- Content an academy publishes: one row per version. The version's material is a course module
-- in Moodle kept hidden until it is published (made visible); its approval and its version are
-- ours (Moodle core has no approval workflow). Only the highest version of a content id is
-- current; an approved, current version due by now is published once, keyed
-- `lms-publish:{tenant}:{content}:v{version}`.
CREATE TABLE lms_content (
    tenant_id       text NOT NULL REFERENCES tenants (id),
    content_id      text NOT NULL CONSTRAINT lms_content_id_valid
                    CHECK (content_id ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$'),
    version         integer NOT NULL CHECK (version > 0),
    title           text NOT NULL,
    course_id       bigint NOT NULL,
    cmid            bigint NOT NULL,
    publish_at      timestamptz NOT NULL,
    approved_by     text,
    approved_at     timestamptz,
    state           text NOT NULL DEFAULT 'waiting' CONSTRAINT lms_content_state_valid
                    CHECK (state IN ('waiting', 'attempted', 'published', 'confirmed',
                                     'superseded', 'failed', 'unknown')),
    -- Why it waits or was not published (not approved, superseded by version N, …).
    reason          text,
    idempotency_key text NOT NULL CONSTRAINT lms_content_key_unique UNIQUE,
    published_at    timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, content_id, version),
    CONSTRAINT lms_content_approval_whole CHECK ((approved_by IS NULL) = (approved_at IS NULL))
);

-- The catch-up queue: an open action of a tenant that can be neither done nor suppressed (a
-- reminder or a certificate that failed its every attempt, a learner without an address, content
-- due and not approved), with the tenant's named owner and backup; closed when it is done or
-- settled, with how.
CREATE TABLE lms_queue (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id   text NOT NULL REFERENCES tenants (id),
    action_key  text NOT NULL,
    kind        text NOT NULL CONSTRAINT lms_queue_kind_valid
                CHECK (kind IN ('reminder', 'certificate', 'publication')),
    what        text NOT NULL,
    reason      text NOT NULL,
    owner       text NOT NULL,
    backup      text,
    queued_at   timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    closed_at   timestamptz,
    closed_how  text,
    CONSTRAINT lms_queue_closed_whole CHECK ((closed_at IS NULL) = (closed_how IS NULL))
);
CREATE UNIQUE INDEX lms_queue_one_open ON lms_queue (action_key) WHERE closed_at IS NULL;

-- An alert may go to people besides the operations list (a catch-up item: the tenant's owner).
ALTER TABLE alerts ADD COLUMN also_to text[] NOT NULL DEFAULT '{}';
ALTER TABLE alerts DROP CONSTRAINT alerts_kind_valid;
ALTER TABLE alerts ADD CONSTRAINT alerts_kind_valid
    CHECK (kind IN ('run_failure', 'dead_letter', 'pending_events', 'stale_evaluate', 'catch_up'));

ALTER TABLE actions DROP CONSTRAINT actions_kind_valid;
ALTER TABLE actions ADD CONSTRAINT actions_kind_valid
    CHECK (kind IN ('task', 'close_task', 'task_update', 'report', 'alert', 'crm_lead',
                    'reminder', 'certificate', 'publication'));
