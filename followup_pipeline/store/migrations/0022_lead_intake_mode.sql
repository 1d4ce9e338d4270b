-- 0022: lead intake's mode lives in the database, switched on purpose (`followup leads go-live`,
-- `followup leads shadow`, both audited) rather than by a setting and a restart. One row, written
-- on first read from FOLLOWUP_LEAD_INTAKE_MODE (default shadow: a fresh installation writes
-- nothing to the CRM until a person switches it). An installation that wrote Leads to the CRM
-- before this migration stays live.
CREATE TABLE lead_intake_mode (
    id          boolean PRIMARY KEY DEFAULT true CONSTRAINT lead_intake_mode_one_row CHECK (id),
    mode        text NOT NULL CONSTRAINT lead_intake_mode_valid CHECK (mode IN ('shadow', 'live')),
    changed_at  timestamptz NOT NULL DEFAULT now(),
    changed_by  text NOT NULL
);

INSERT INTO lead_intake_mode (mode, changed_by)
SELECT 'live', 'the upgrade: live CRM writes on record'
WHERE EXISTS (SELECT 1 FROM actions WHERE kind = 'crm_lead' AND outcome <> 'suppressed');
