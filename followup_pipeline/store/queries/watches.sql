-- name: insert_watches
-- Open watches with their planned steps (the same plan for all), in one statement, except for
-- deals with one open already (a redelivery never resets a cadence): (id, subject_id) of those
-- opened.
WITH subject AS (
    SELECT * FROM unnest(
        %(subject_ids)s::text[], %(names)s::text[], %(account_names)s::text[],
        %(assigned_user_ids)s::text[], %(assigned_user_names)s::text[], %(stages)s::text[],
        %(crm_urls)s::text[], %(amounts)s::numeric[], %(currencies)s::text[]
    ) AS s(subject_id, subject_name, account_name, assigned_user_id, assigned_user_name, stage,
           crm_url, amount, amount_currency)
), watch AS (
    INSERT INTO watches (
        subject_type, subject_id, subject_name, account_name, assigned_user_id,
        assigned_user_name, stage, cadence_name, offsets, time_zone, base_on, registered_at,
        registered_by, source_event_id, crm_url, amount, amount_currency
    )
    SELECT %(subject_type)s, s.subject_id, s.subject_name, s.account_name, s.assigned_user_id,
           s.assigned_user_name, s.stage, %(cadence_name)s, %(offsets)s, %(time_zone)s,
           %(base_on)s, %(registered_at)s, %(registered_by)s, %(source_event_id)s, s.crm_url,
           s.amount, s.amount_currency
    FROM subject s
    ON CONFLICT (subject_type, subject_id) WHERE closed_at IS NULL DO NOTHING
    RETURNING id, subject_id
), planned AS (
    INSERT INTO watch_steps (watch_id, step_no, offset_days, due_on)
    SELECT watch.id, p.step_no, p.offset_days, p.due_on
    FROM watch,
         unnest(%(step_nos)s::int[], %(offset_days)s::int[], %(due_ons)s::date[])
             AS p(step_no, offset_days, due_on)
), entered AS (
    -- (the census: each deal enters its stage as its watch opens)
    INSERT INTO stage_entries (watch_id, stage, entered_at)
    SELECT watch.id, s.stage, %(registered_at)s
    FROM watch JOIN subject s ON s.subject_id = watch.subject_id
)
SELECT id, subject_id FROM watch;

-- name: open_watch_of_subject
-- The open watch of a deal, if any.
SELECT * FROM watches
WHERE subject_type = %(subject_type)s AND subject_id = %(subject_id)s AND closed_at IS NULL;

-- name: latest_watch_of_subject
-- The most recent watch of a deal, open or closed.
SELECT * FROM watches
WHERE subject_type = %(subject_type)s AND subject_id = %(subject_id)s
ORDER BY registered_at DESC, id DESC
LIMIT 1;

-- name: latest_watches_of_subjects
-- The most recent watch of each deal named, open or closed.
SELECT DISTINCT ON (subject_id) * FROM watches
WHERE subject_type = %(subject_type)s AND subject_id = ANY(%(subject_ids)s)
ORDER BY subject_id, registered_at DESC, id DESC;

-- name: watch_by_id
-- One watch.
SELECT * FROM watches WHERE id = %(watch_id)s;

-- name: open_watches
-- Every open watch, oldest first.
SELECT * FROM watches WHERE closed_at IS NULL ORDER BY registered_at, id;

-- name: count_open_watches
-- How many watches are open.
SELECT count(*) AS n FROM watches WHERE closed_at IS NULL;

-- name: close_watches
-- Close open watches, each with its reason; a closed watch stays as it was. The ids closed.
UPDATE watches w SET closed_at = %(closed_at)s, closed_reason = c.reason
FROM unnest(%(watch_ids)s::bigint[], %(reasons)s::text[]) AS c(id, reason)
WHERE w.id = c.id AND w.closed_at IS NULL
RETURNING w.id;

-- name: mark_reset
-- Remember when a watch's cadence was last reset by activity.
UPDATE watches SET last_reset_at = %(reset_at)s WHERE id = %(watch_id)s;

-- name: watch_by_id_locked
-- One watch, locked for an operator's change (pause, resume, unwatch).
SELECT * FROM watches WHERE id = %(watch_id)s FOR UPDATE;

-- name: set_paused
-- Pause (an instant, and the day it ends, if any) or resume (NULL) an open watch.
UPDATE watches SET paused_at = %(paused_at)s, paused_until = %(until)s
WHERE id = %(watch_id)s AND closed_at IS NULL
RETURNING id;

-- name: pauses_ended
-- Open watches whose pause ended by today in their own zone.
SELECT * FROM watches
WHERE closed_at IS NULL AND paused_at IS NOT NULL AND paused_until IS NOT NULL
  AND paused_until <= (%(now)s::timestamptz AT TIME ZONE time_zone)::date
ORDER BY id;

-- name: set_watch_error
-- Remember (or clear, with NULL) the CRM error that holds a watch's due step back.
UPDATE watches SET last_error = %(error)s, last_error_at = %(at)s WHERE id = %(watch_id)s;

-- name: set_watch_facts
-- Copy the CRM's current names, owner, stage and amount onto open watches (arrays in step), where
-- they differ; a deal moved to another stage enters it at %(at)s (the census).
WITH entered AS (
    INSERT INTO stage_entries (watch_id, stage, entered_at)
    SELECT w.id, v.stage, %(at)s
    FROM unnest(%(watch_ids)s::bigint[], %(stages)s::text[]) AS v(id, stage)
    JOIN watches w ON w.id = v.id
    WHERE w.closed_at IS NULL AND w.stage IS DISTINCT FROM v.stage
)
UPDATE watches w
SET subject_name = v.name, account_name = v.account_name, assigned_user_id = v.user_id,
    assigned_user_name = v.user_name, stage = v.stage, amount = v.amount,
    amount_currency = v.currency
FROM unnest(%(watch_ids)s::bigint[], %(names)s::text[], %(account_names)s::text[],
            %(user_ids)s::text[], %(user_names)s::text[], %(stages)s::text[],
            %(amounts)s::numeric[], %(currencies)s::text[])
     AS v(id, name, account_name, user_id, user_name, stage, amount, currency)
WHERE w.id = v.id AND w.closed_at IS NULL
  AND (w.subject_name, w.account_name, w.assigned_user_id, w.assigned_user_name, w.stage,
       w.amount, w.amount_currency)
      IS DISTINCT FROM (v.name, v.account_name, v.user_id, v.user_name, v.stage, v.amount,
                        v.currency);

-- name: refresh_subject
-- Copy the CRM's current names onto a watch and clear the error that held it back; a deal moved
-- to another stage enters it at %(at)s (the census).
WITH entered AS (
    INSERT INTO stage_entries (watch_id, stage, entered_at)
    SELECT w.id, %(stage)s, %(at)s FROM watches w
    WHERE w.id = %(watch_id)s AND w.stage IS DISTINCT FROM %(stage)s
)
UPDATE watches
SET subject_name = %(name)s, account_name = %(account_name)s,
    assigned_user_id = %(assigned_user_id)s, assigned_user_name = %(assigned_user_name)s,
    stage = %(stage)s, amount = %(amount)s, amount_currency = %(amount_currency)s,
    last_error = NULL, last_error_at = NULL
WHERE id = %(watch_id)s;

-- name: list_watches
-- Watches for the operator: open ones, or all (the closed after the open), the soonest next due
-- step first (none last), then by the deal's name.
SELECT * FROM (
    SELECT w.*, (
        SELECT min(s.due_on) FROM watch_steps s
        WHERE s.watch_id = w.id AND s.fired_at IS NULL AND s.skipped_at IS NULL
    ) AS next_due_on
    FROM watches w
    WHERE %(all)s OR w.closed_at IS NULL
) listed
ORDER BY closed_at IS NOT NULL, next_due_on NULLS LAST, lower(subject_name), subject_name, id
LIMIT %(limit)s;

-- name: due_watches
-- Open watches with a step neither fired nor skipped that is due by the local date of %(now)s
-- in the watch's own time zone, oldest first: the only watches the due-step pass visits. The
-- steps are found through their partial index (no local date is past UTC's date + 1), so the
-- cost follows the steps due, not the number of watches.
SELECT w.* FROM watches w
WHERE w.closed_at IS NULL
  AND w.id IN (
      SELECT s.watch_id FROM watch_steps s
      WHERE s.fired_at IS NULL AND s.skipped_at IS NULL
        AND s.due_on <= (%(now)s::timestamptz AT TIME ZONE 'UTC')::date + 1
        AND s.due_on <= (%(now)s::timestamptz AT TIME ZONE w.time_zone)::date
  )
ORDER BY w.registered_at, w.id;

-- name: quiet_watches
-- Open watches that may be exhausted: every step is fired or skipped, the last one fired, and at
-- least %(min_days)s calendar days (local) passed since it fired and since the last reset. The
-- caller counts the business days; a business day is never more than a calendar day.
SELECT w.* FROM watches w
JOIN LATERAL (
    SELECT s.fired_at FROM watch_steps s WHERE s.watch_id = w.id ORDER BY s.step_no DESC LIMIT 1
) last ON true
WHERE w.closed_at IS NULL
  AND last.fired_at IS NOT NULL
  AND NOT EXISTS (
      SELECT 1 FROM watch_steps s
      WHERE s.watch_id = w.id AND s.fired_at IS NULL AND s.skipped_at IS NULL
  )
  AND (%(min_days)s <= 0
       OR (%(now)s::timestamptz AT TIME ZONE w.time_zone)::date
          - (greatest(last.fired_at, w.last_reset_at) AT TIME ZONE w.time_zone)::date
          >= %(min_days)s)
ORDER BY w.registered_at, w.id;

-- name: open_watches_of_subjects
-- The open watches of the deals named, oldest first (what an hourly run's changes touch).
SELECT * FROM watches
WHERE subject_type = %(subject_type)s AND subject_id = ANY(%(subject_ids)s) AND closed_at IS NULL
ORDER BY registered_at, id;

-- name: oldest_open_activity_start
-- Since when activity counts for the open watch that counts it the longest (NULL: none open).
SELECT min(coalesce(last_reset_at, registered_at)) AS since FROM watches WHERE closed_at IS NULL;

-- name: clear_open_watch_errors
-- Clear the CRM error of every open watch that holds one (the CRM answered again).
UPDATE watches SET last_error = NULL, last_error_at = NULL
WHERE closed_at IS NULL AND last_error IS NOT NULL;

-- name: set_open_watch_errors
-- Set the CRM error of every open watch (their activity could not be read); their ids.
UPDATE watches SET last_error = %(error)s, last_error_at = %(at)s
WHERE closed_at IS NULL
RETURNING id;
