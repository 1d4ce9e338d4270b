-- name: census_record
-- Today's reading of the watched stages: how many deals the CRM listed in each.
INSERT INTO stage_census (day, stage, listed, recorded_at)
SELECT %(day)s, s.stage, s.listed, %(at)s
FROM unnest(%(stages)s::text[], %(listed)s::int[]) AS s(stage, listed)
ON CONFLICT (day, stage) DO UPDATE
SET listed = EXCLUDED.listed, recorded_at = EXCLUDED.recorded_at;

-- name: census_since
-- The census from %(since)s on (days of the zone %(zone)s), oldest day first: what the CRM listed
-- (NULL: no reading that day) and how many deals entered each stage while followed.
SELECT coalesce(r.day, e.day) AS day, coalesce(r.stage, e.stage) AS stage, r.listed,
       coalesce(e.entered, 0) AS entered
FROM (SELECT day, stage, listed FROM stage_census WHERE day >= %(since)s) r
FULL JOIN (
    SELECT (x.entered_at AT TIME ZONE %(zone)s)::date AS day, x.stage, count(*)::int AS entered
    FROM stage_entries x
    WHERE x.entered_at >= %(since_at)s
    GROUP BY 1, 2
) e ON e.day = r.day AND e.stage = r.stage
WHERE coalesce(r.day, e.day) >= %(since)s
ORDER BY 1, 2;
