-- 0016: lead intake, part 3 (docs/architecture.md §9): the one write to the CRM, a Lead upserted
-- through the action ledger, and shadow mode, which records what it would have written.

-- The upsert is an action of its own kind, keyed `lead:{event_id}:crm_upsert`; shadow mode (and
-- the global dry run) records it suppressed with reason `shadow` and what it would have written
-- in its payload.
ALTER TABLE actions DROP CONSTRAINT actions_kind_valid;
ALTER TABLE actions ADD CONSTRAINT actions_kind_valid
    CHECK (kind IN ('task', 'close_task', 'task_update', 'report', 'alert', 'crm_lead'));
ALTER TABLE actions DROP CONSTRAINT actions_reason_valid;
ALTER TABLE actions ADD CONSTRAINT actions_reason_valid
    CHECK (reason IN ('deal_closed', 'superseded', 'paused', 'dry_run', 'nothing_due', 'shadow'));

-- When the CRM last saved the Lead as we wrote it (its `modifiedAt`): the nightly sweep leaves
-- that version out, and reads a later edit by a person.
ALTER TABLE leads ADD COLUMN crm_written_at timestamptz;
-- The classification's attributes as we last saw them hold our values in the CRM's Lead: one a
-- person changed since is theirs, and not written over.
ALTER TABLE leads ADD COLUMN crm_fields jsonb NOT NULL DEFAULT '{}';

-- The crm_upsert actions of a lead event, by key (the shadow comparison reads them by date).
CREATE INDEX actions_crm_lead_created ON actions (created_at) WHERE kind = 'crm_lead';
