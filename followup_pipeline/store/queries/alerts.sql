-- name: alert_lock_fingerprint
-- One decision at a time per fingerprint (send or hold), for the rest of the transaction.
SELECT pg_advisory_xact_lock(hashtextextended('alerts:' || %(fingerprint)s, 0));

-- name: alert_insert
-- Record what raised an alert, once per source; no row when it was recorded before.
INSERT INTO alerts (kind, source, fingerprint, subject, message, run_id, occurred_at, also_to)
VALUES (%(kind)s, %(source)s, %(fingerprint)s, %(subject)s, %(message)s, %(run_id)s,
        %(occurred_at)s, %(also_to)s)
ON CONFLICT (source) DO NOTHING
RETURNING id;

-- name: alert_last_sent
-- The latest alert of a fingerprint that went out (or goes out) at or after a moment.
SELECT action_key, occurred_at FROM alerts
WHERE fingerprint = %(fingerprint)s AND action_key IS NOT NULL AND occurred_at >= %(since)s
  AND id <> %(id)s
ORDER BY occurred_at DESC LIMIT 1;

-- name: alert_count_held
-- The held repeats of a fingerprint are counted by its next alert: how many, since when.
WITH counted AS (
    UPDATE alerts SET counted_in = %(key)s
    WHERE fingerprint = %(fingerprint)s AND action_key IS NULL AND counted_in IS NULL
      AND id <> %(id)s
    RETURNING occurred_at
)
SELECT count(*) AS held, min(occurred_at) AS held_since FROM counted;

-- name: alert_mark_known
-- Rows recorded on the checks' first tick (dead letters from before alerting): on the record,
-- never sent, never counted.
UPDATE alerts SET counted_in = 'known before alerting' WHERE id = ANY(%(ids)s::bigint[]);

-- name: dead_letter_alerts_since
-- The dead-letter alerts that went out at or after a moment (the stamp of its UTC time, as the
-- keys end in it: `…@20260302T090000`; the fixed width compares as the moments do): how many
-- of their own (one dead letter each; from before the digests, the few found in one tick),
-- and how many digests of held ones.
SELECT count(DISTINCT action_key) FILTER (WHERE action_key NOT LIKE 'alert:dead:digest:%%')
           AS single,
       count(DISTINCT action_key) FILTER (WHERE action_key LIKE 'alert:dead:digest:%%')
           AS digests
FROM alerts
WHERE kind = 'dead_letter' AND action_key IS NOT NULL
  AND substring(action_key FROM '@([0-9]{8}T[0-9]{6})$') >= %(since)s;

-- name: dead_letters_held
-- Dead letters held back for the next digest (recorded past the window's limit, no alert yet),
-- in the order they were recorded.
SELECT id, subject FROM alerts
WHERE kind = 'dead_letter' AND action_key IS NULL AND counted_in IS NULL
ORDER BY id;

-- name: alert_assign
-- The alert rows of ids go out under key; the first counts the held repeats.
UPDATE alerts SET action_key = %(key)s,
    held = CASE WHEN id = (%(ids)s::bigint[])[1] THEN %(held)s ELSE 0 END
WHERE id = ANY(%(ids)s::bigint[]);

-- name: alert_unsent
-- Alerts that have not reached anyone yet (neither their mail nor their ClickUp task), newest
-- first, with how long ago they were recorded (by the database's clock) and their attempts.
SELECT a.action_key AS key, min(a.id) AS first_id,
       extract(epoch FROM now() - min(a.recorded_at))::float8 AS age_s,
       coalesce(max(m.attempts), 0) + coalesce(max(c.attempts), 0) AS attempts
FROM alerts a
LEFT JOIN actions m ON m.idempotency_key = a.action_key
LEFT JOIN actions c ON c.idempotency_key = a.action_key || ':clickup'
WHERE a.action_key IS NOT NULL
  AND (m.outcome IS NULL OR m.outcome NOT IN ('accepted', 'confirmed', 'suppressed'))
  AND (c.outcome IS NULL OR c.outcome NOT IN ('accepted', 'confirmed', 'suppressed'))
GROUP BY a.action_key
ORDER BY min(a.id) DESC
LIMIT %(limit)s;

-- name: alert_count_unsent
-- How many alerts reached nobody yet.
SELECT count(DISTINCT a.action_key) AS unsent
FROM alerts a
LEFT JOIN actions m ON m.idempotency_key = a.action_key
LEFT JOIN actions c ON c.idempotency_key = a.action_key || ':clickup'
WHERE a.action_key IS NOT NULL
  AND (m.outcome IS NULL OR m.outcome NOT IN ('accepted', 'confirmed', 'suppressed'))
  AND (c.outcome IS NULL OR c.outcome NOT IN ('accepted', 'confirmed', 'suppressed'));

-- name: alerts_recorded
-- Which of these sources are recorded already.
SELECT source FROM alerts WHERE source = ANY(%(sources)s::text[]);

-- name: alert_rows_of_key
-- The rows an alert is about, in order.
SELECT id, kind, subject, message, run_id, occurred_at, held, counted_in
FROM alerts WHERE action_key = %(key)s ORDER BY id;

-- name: alert_sources_of_key
-- What raised each row of an alert (``work:<item>:<failure>`` for an item of the work list).
SELECT source FROM alerts WHERE action_key = %(key)s ORDER BY id;

-- name: alert_also_to
-- Whom an alert goes to besides the operations list, in the order first named.
SELECT address FROM (
    SELECT DISTINCT ON (lower(address)) address, id, n
    FROM alerts, unnest(also_to) WITH ORDINALITY AS u(address, n)
    WHERE action_key = %(key)s
    ORDER BY lower(address), id, n
) named ORDER BY id, n;

-- name: alert_held_since
-- When the oldest repeat counted by an alert happened.
SELECT min(occurred_at) AS since FROM alerts WHERE counted_in = %(key)s;

-- name: alert_list
-- Alerts recorded in the last days (all with NULL), for `followup alerts list`: each row, the
-- alert it went out in or was counted by, and how its mail and its ClickUp task ended.
SELECT a.id, a.kind, a.subject, a.message, a.run_id, a.occurred_at, a.action_key, a.held,
       a.counted_in, m.outcome AS mail_outcome, m.last_error AS mail_error,
       c.outcome AS task_outcome, c.provider_ref AS task_ref, c.last_error AS task_error
FROM alerts a
LEFT JOIN actions m ON m.idempotency_key = a.action_key
LEFT JOIN actions c ON c.idempotency_key = a.action_key || ':clickup'
WHERE %(days)s::int IS NULL OR a.recorded_at >= now() - make_interval(days => %(days)s::int)
ORDER BY a.id DESC;

-- name: oldest_pending_event
-- The oldest event still pending, for the lag alert.
SELECT id, source, event_type, received_at, attempts, last_error
FROM events WHERE status = 'pending' ORDER BY received_at, id LIMIT 1;

-- name: alerts_degraded_open
-- Each job's newest degraded alert with no "recovered" one yet (source
-- 'degraded:<job>:<run id>' against 'recovered:<job>:<run id>'): its episode goes on.
SELECT DISTINCT ON (a.subject) a.subject AS job, a.source, a.occurred_at
FROM alerts a
WHERE a.kind = 'degraded'
  AND NOT EXISTS (
      SELECT 1 FROM alerts r WHERE r.source = 'recovered:' || substr(a.source, 10)
  )
ORDER BY a.subject, a.occurred_at DESC;

-- name: alerts_watchdog_open
-- Each cause the watchdog alerted (fingerprint 'watchdog:<cause>', source
-- 'watchdog:<cause>:<stamp>') with no "healed" one yet ('healed:<cause>:<stamp>').
SELECT DISTINCT ON (a.fingerprint) substr(a.fingerprint, 10) AS cause, a.source, a.subject,
       a.occurred_at
FROM alerts a
WHERE a.kind = 'watchdog'
  AND NOT EXISTS (SELECT 1 FROM alerts h WHERE h.source = 'healed:' || substr(a.source, 10))
ORDER BY a.fingerprint, a.occurred_at DESC;

-- name: alerts_run_failures
-- The failed runs recorded from %(since)s to %(until)s (one row each, held repeats too), oldest
-- first: the job, its first error ("Type: detail"), the run.
SELECT subject AS job, message, run_id, occurred_at
FROM alerts
WHERE kind = 'run_failure' AND occurred_at >= %(since)s AND occurred_at < %(until)s
ORDER BY occurred_at, id;

