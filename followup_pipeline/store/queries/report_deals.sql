-- name: week_deals_closed
-- The watches closed in [start, until): won, lost, or left follow-up otherwise, with the watch's
-- copies of the deal's name, owner and amount.
SELECT subject_id AS deal_id, subject_name AS deal_name, assigned_user_name AS owner, amount,
       amount_currency AS currency, closed_reason AS what, closed_at AS at, crm_url
FROM watches
WHERE closed_at >= %(start)s AND closed_at < %(until)s
ORDER BY closed_at, subject_name;

-- name: week_deals_entered
-- The watches that began in [start, until).
SELECT subject_id AS deal_id, subject_name AS deal_name, assigned_user_name AS owner, amount,
       amount_currency AS currency, 'entered' AS what, registered_at AS at, crm_url
FROM watches
WHERE registered_at >= %(start)s AND registered_at < %(until)s
ORDER BY registered_at, subject_name;

-- name: week_value_by_owner
-- The open follow-ups at `until` per salesperson and currency: how many, and their value.
-- (An owner's deals without an amount: none, shown as such; each currency its own row.)
SELECT assigned_user_name AS owner, amount_currency AS currency, count(*)::int AS deals,
       sum(amount) AS amount
FROM watches
WHERE closed_at IS NULL AND registered_at < %(until)s
GROUP BY assigned_user_name, amount_currency
ORDER BY assigned_user_name NULLS LAST, amount_currency NULLS LAST;

-- name: week_quiet_deals
-- The open deals longest without contact at `until` (their last contact, else since their
-- follow-up began), the longest first.
SELECT subject_name AS deal_name, assigned_user_name AS owner, last_reset_at AS contact_at,
       base_on AS started_on, crm_url
FROM watches
WHERE closed_at IS NULL AND registered_at < %(until)s
ORDER BY coalesce((last_reset_at AT TIME ZONE time_zone)::date, base_on), subject_name
LIMIT %(limit)s;
