-- name: lead_mode_seed
-- The mode's first row, from the setting, when there is none yet (the first read seeds it).
INSERT INTO lead_intake_mode (mode, changed_at, changed_by)
VALUES (%(mode)s, coalesce(%(at)s::timestamptz, now()), %(by)s)
ON CONFLICT (id) DO NOTHING;

-- name: lead_mode_current
-- Lead intake's mode, since when and by whom.
SELECT mode, changed_at, changed_by FROM lead_intake_mode;

-- name: lead_mode_set
-- Switch the mode (the caller records the audit in the same transaction); the row as before, or
-- none when the mode was that already.
WITH before AS (SELECT mode, changed_at, changed_by FROM lead_intake_mode FOR UPDATE)
UPDATE lead_intake_mode AS m
SET mode = %(mode)s, changed_at = coalesce(%(at)s::timestamptz, now()), changed_by = %(by)s
FROM before
WHERE before.mode <> %(mode)s
RETURNING before.mode, before.changed_at, before.changed_by;

