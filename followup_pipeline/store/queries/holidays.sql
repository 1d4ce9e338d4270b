-- name: holiday_overrides
-- The local corrections of the business calendar: ('holiday' | 'workday') per day.
SELECT day, kind FROM holidays ORDER BY day;
