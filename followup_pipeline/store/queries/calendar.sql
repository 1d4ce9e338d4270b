-- name: holiday_overrides
-- The local corrections of the business calendar: ('holiday' | 'workday') per day.
SELECT day, kind FROM holidays ORDER BY day;

-- name: cadence_offsets
-- The offsets of a named cadence.
SELECT offsets FROM cadences WHERE name = %(name)s;
