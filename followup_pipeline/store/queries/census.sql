-- name: census_record
-- Today's census of the watched stages: how many deals the CRM listed in each (this reading),
-- and how many watches opened today (from %(day_start)s to %(day_end)s) are in it.
INSERT INTO stage_census (day, stage, listed, entered, recorded_at)
SELECT %(day)s, s.stage, s.listed,
       (SELECT count(*) FROM watches w
        WHERE w.stage = s.stage AND w.registered_at >= %(day_start)s
          AND w.registered_at < %(day_end)s)::int,
       %(at)s
FROM unnest(%(stages)s::text[], %(listed)s::int[]) AS s(stage, listed)
ON CONFLICT (day, stage) DO UPDATE
SET listed = EXCLUDED.listed, entered = EXCLUDED.entered, recorded_at = EXCLUDED.recorded_at;

-- name: census_since
-- The census from %(since)s on, oldest day first.
SELECT day, stage, listed, entered FROM stage_census
WHERE day >= %(since)s
ORDER BY day, stage;
