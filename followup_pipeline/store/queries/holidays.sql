-- name: holiday_overrides
-- The local corrections of the business calendar: ('holiday' | 'workday') per day.
SELECT day, kind FROM holidays ORDER BY day;

-- name: holiday_list
-- Every local correction, with its name, in day order.
SELECT day, kind, name, created_at FROM holidays ORDER BY day;

-- name: holiday_put
-- A company day off ('holiday') or a public holiday worked ('workday'), made or changed.
INSERT INTO holidays (day, kind, name) VALUES (%(day)s, %(kind)s, %(name)s)
ON CONFLICT (day) DO UPDATE SET kind = EXCLUDED.kind, name = EXCLUDED.name
RETURNING (xmax = 0) AS new;

-- name: holiday_remove
DELETE FROM holidays WHERE day = %(day)s RETURNING kind, name;
