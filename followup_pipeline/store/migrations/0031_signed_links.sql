-- Signed links a person clicks in a mail (domain/links.py): a learner's one-click opt-out, an
-- academy owner's approval of a content version or acknowledgement of an item. A link is a row
-- bound to what it may do, made once per action (`subject`: the action's key); its token (in the
-- URL) carries only the row's random id and a MAC, never personal data. A single-use link is
-- spent by its first use.
CREATE TABLE links (
    id text PRIMARY KEY CHECK (id ~ '^[A-Za-z0-9_-]{16,64}$'),
    purpose text NOT NULL CHECK (purpose IN ('opt_out', 'approve', 'acknowledge')),
    subject text NOT NULL,
    tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    learner_id bigint,
    content_id text,
    version integer,
    work_item_id bigint,
    expires_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    used_at timestamptz,
    uses integer NOT NULL DEFAULT 0 CHECK (uses >= 0),
    CONSTRAINT links_bound CHECK (
        (purpose = 'opt_out' AND learner_id IS NOT NULL)
        OR (purpose = 'approve' AND content_id IS NOT NULL AND version IS NOT NULL)
        OR (purpose = 'acknowledge' AND work_item_id IS NOT NULL)
    )
);
CREATE UNIQUE INDEX links_subject ON links (purpose, subject);
CREATE INDEX links_expires ON links (expires_at);

-- The academy's language (what its learners and owner read by default) and each learner's own
-- language and zone as their Moodle profile gives them (None: the academy's).
ALTER TABLE tenants ADD COLUMN language text NOT NULL DEFAULT 'en'
    CONSTRAINT tenants_language_valid CHECK (language ~ '^[a-z]{2}$');
CREATE TABLE lms_learners (
    tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    learner_id bigint NOT NULL,
    lang text,
    time_zone text,
    seen_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, learner_id)
);
