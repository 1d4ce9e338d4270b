-- name: cadence_offsets
-- The offsets of a named cadence.
SELECT offsets FROM cadences WHERE name = %(name)s;

-- name: upsert_cadence
-- Define a named cadence as configured (FOLLOWUP_CADENCE); plans made before keep their offsets.
INSERT INTO cadences (name, offsets) VALUES (%(name)s, %(offsets)s)
ON CONFLICT (name) DO UPDATE SET offsets = EXCLUDED.offsets
WHERE cadences.offsets IS DISTINCT FROM EXCLUDED.offsets;

-- name: cadence_list
-- Every named cadence, by name.
SELECT name, offsets FROM cadences ORDER BY name;
