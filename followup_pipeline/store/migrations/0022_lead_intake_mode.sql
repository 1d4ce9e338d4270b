-- 0022: lead intake's mode lives in the database, switched on purpose (`followup leads go-live`,
-- `followup leads shadow`, both audited) rather than by a setting and a restart. One row, written
-- on first read from FOLLOWUP_LEAD_INTAKE_MODE (default shadow: a fresh installation writes
-- nothing to the CRM until a person switches it). An installation whose newest CRM write was a
-- live one (not recorded `suppressed`, i.e. not shadow or a dry run) stays live, and the audit
-- says so; one that had gone back to shadow is seeded from the setting like a new one.
CREATE TABLE lead_intake_mode (
    id          boolean PRIMARY KEY DEFAULT true CONSTRAINT lead_intake_mode_one_row CHECK (id),
    mode        text NOT NULL CONSTRAINT lead_intake_mode_valid CHECK (mode IN ('shadow', 'live')),
    changed_at  timestamptz NOT NULL DEFAULT now(),
    changed_by  text NOT NULL
);

INSERT INTO lead_intake_mode (mode, changed_by)
SELECT 'live', 'the upgrade: live CRM writes on record'
FROM (SELECT outcome FROM actions WHERE kind = 'crm_lead' ORDER BY id DESC LIMIT 1) AS newest
WHERE newest.outcome <> 'suppressed';

INSERT INTO audit_log (actor, action, subject, detail)
SELECT changed_by, 'leads.go_live', 'lead-intake', 'kept live by migration 0022: the newest CRM write was live'
FROM lead_intake_mode;
