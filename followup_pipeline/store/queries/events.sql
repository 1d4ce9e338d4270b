-- name: events_store
-- Store one delivery in one round trip (the function of migrations 0009, 0010 and 0020, stamped
-- with the caller's clock, or the database's when it gives none): its event id,
-- status, and whether it was a redelivery (then counted, not stored): of the same source and
-- delivery id whenever it came (Standard Webhooks), or, without an id (EspoCRM), of the same
-- dedup key within the window.
SELECT event_id, event_status AS status, duplicate
FROM store_delivery(
    %(source)s, %(event_type)s, %(dedup_key)s, %(body)s, %(headers)s, %(status)s,
    %(last_error)s, %(dead_step)s, %(window)s::interval, %(namespace)s, %(delivery_id)s::text,
    %(received_at)s::timestamptz
);

-- name: events_claim
-- Lease due events of the handled sources: the claim commits at once, so no row stays locked
-- while the CRM is asked; a run that dies lets its lease run out. A claim is no attempt: the
-- attempt is charged when work on the event starts (events_start_attempt).
UPDATE events
SET claimed_until = clock_timestamp() + %(lease)s::interval, claimed_by = %(run)s
WHERE id IN (
    SELECT id FROM events
    WHERE status = 'pending' AND next_attempt_at <= now()
      AND source = ANY(%(sources)s::text[])
      AND (claimed_until IS NULL OR claimed_until < now())
      AND NOT (id = ANY(%(exclude)s::bigint[]))
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
RETURNING *;

-- name: events_claim_ids
-- Lease named pending events (a replay), whatever their next attempt time.
UPDATE events
SET claimed_until = clock_timestamp() + %(lease)s::interval, claimed_by = %(run)s
WHERE id IN (
    SELECT id FROM events
    WHERE status = 'pending' AND id = ANY(%(ids)s::bigint[])
      AND (claimed_until IS NULL OR claimed_until < now())
    ORDER BY id
    FOR UPDATE SKIP LOCKED
)
RETURNING *;

-- name: events_due
-- What the sensor looks at: the due events (ids and attempts), oldest first.
SELECT id, attempts FROM events
WHERE status = 'pending' AND next_attempt_at <= now() AND source = ANY(%(sources)s::text[])
  AND (claimed_until IS NULL OR claimed_until < now())
ORDER BY id
LIMIT %(limit)s;

-- name: events_start_attempt
-- Work on a claimed event starts: one attempt more, committed before its first item.
UPDATE events SET attempts = attempts + 1 WHERE id = %(id)s
RETURNING attempts;

-- name: events_mark_done
-- Every item of the event is done (and the count of runs it stopped in a row starts again).
UPDATE events
SET status = 'done', processed_at = clock_timestamp(), dead_step = NULL, claimed_until = NULL,
    run_stops = 0
WHERE id = %(id)s;

-- name: events_mark_retry
-- A failed attempt (charged when work on it started): wait before the next one, from now — not
-- from the start of the run.
UPDATE events
SET last_error = %(error)s, dead_step = %(step)s, claimed_until = NULL,
    next_attempt_at = clock_timestamp() + %(delay)s::interval, run_stops = 0
WHERE id = %(id)s;

-- name: events_mark_dead
-- The last attempt failed: a dead letter with its step and last error.
UPDATE events
SET status = 'dead', last_error = %(error)s, dead_step = %(step)s, claimed_until = NULL,
    processed_at = clock_timestamp()
WHERE id = %(id)s;

-- name: events_run_stop
-- The handling of a claimed event met an error of the database itself (engine/run_stops.py): the
-- attempt charged when it started is given back, one more run stopped in a row is counted, and
-- the error kept. The lease is kept: the event waits it out. No row when the event is no longer
-- this run's claim (its lease ran out and another run took it, or it ended meanwhile).
UPDATE events
SET attempts = greatest(attempts - 1, 0), run_stops = run_stops + 1,
    last_error = %(error)s, dead_step = %(step)s
WHERE id = %(id)s AND status = 'pending' AND claimed_by = %(run)s
RETURNING run_stops;

-- name: events_release
-- A run that stops frees the events of its batch that it did not start: the next run takes them
-- at once, not after their leases.
UPDATE events SET claimed_until = NULL
WHERE id = ANY(%(ids)s::bigint[]) AND status = 'pending' AND claimed_by = %(run)s;

-- name: events_requeue
-- Replay: back to pending under its original id, with fresh attempts (and no run stopped).
UPDATE events
SET status = 'pending', attempts = 0, next_attempt_at = now(), processed_at = NULL,
    claimed_until = NULL, run_stops = 0
WHERE id = %(id)s AND status IN ('dead', 'unhandled')
RETURNING id;

-- name: step_completion_insert
-- Record finished steps of one event; a second record of the same key changes nothing.
INSERT INTO step_completions (key, event_id, result)
SELECT k, %(event_id)s, r FROM unnest(%(keys)s::text[], %(results)s::jsonb[]) AS c(k, r)
ON CONFLICT (key) DO NOTHING;

-- name: step_completion_keys
-- The keys of the finished steps of one event (read once when its items start).
SELECT key FROM step_completions WHERE event_id = %(event_id)s;

-- name: step_completions_of_event
-- The finished steps of one event, in order.
SELECT key, completed_at, result FROM step_completions
WHERE event_id = %(event_id)s ORDER BY completed_at, key;

-- name: event_by_id
-- One event, whole.
SELECT * FROM events WHERE id = %(id)s;

-- name: events_dead_letters
-- Dead-lettered events, oldest first.
SELECT id, source, event_type, received_at, attempts, dead_step, last_error, processed_at
FROM events WHERE status = 'dead' ORDER BY id;

-- name: events_gauges
-- For /metrics: the dead-letter count (a dead event a person closed in the work list, with a
-- reason, counts no more), the age in seconds of the oldest pending event, and the model
-- answers waiting for an operator's review.
SELECT
    (SELECT count(*) FROM events e WHERE e.status = 'dead'
       AND NOT EXISTS (SELECT 1 FROM work_items w
                       WHERE w.event_id = e.id AND w.kind = 'dead_event'
                         AND w.closed_how = 'decided'
                         AND w.failed_at >= coalesce(e.processed_at, e.received_at))) AS dead,
    (SELECT count(*) FROM events WHERE status = 'pending') AS pending,
    (SELECT extract(epoch FROM now() - min(received_at)) FROM events WHERE status = 'pending')
        AS oldest_pending_s,
    (SELECT count(*) FROM review_items WHERE resolved_at IS NULL) AS review_open;

-- name: database_ping
-- The health check: the database answers.
SELECT 1 AS ok;

-- name: deal_marks_claim
-- Mark this event as the newest applied to each deal named, unless a newer one was (ordered by
-- receipt, then id): the deals marked; the others are superseded. The marks stay locked until
-- the transaction ends, in both cases; they are taken in the deals' order, so two transactions
-- marking the same deals cannot deadlock.
INSERT INTO deal_marks (subject_id, last_event_id, last_received_at)
SELECT d, %(event_id)s, %(received_at)s FROM unnest(%(deal_ids)s::text[]) AS d ORDER BY d
ON CONFLICT (subject_type, subject_id) DO UPDATE
SET last_event_id = EXCLUDED.last_event_id, last_received_at = EXCLUDED.last_received_at
WHERE (deal_marks.last_received_at, deal_marks.last_event_id)
      <= (EXCLUDED.last_received_at, EXCLUDED.last_event_id)
RETURNING subject_id;

-- name: invalid_items
-- Items recorded as invalid (a malformed id or name) and skipped, with their event, oldest first.
SELECT e.id AS event_id, e.source, e.event_type, e.attempts, c.key, c.completed_at,
       c.result ->> 'reason' AS reason
FROM step_completions c
JOIN events e ON e.id = c.event_id
WHERE c.result ->> 'outcome' = 'invalid'
ORDER BY c.completed_at, c.key;

-- name: webhook_silence
-- When the last EspoCRM delivery arrived, and how many watches reconciliation opened since the
-- given moment (deals that changed without a webhook reaching us). The machine's first
-- reconciliation, which brings in the deals that were there before it (no webhook was due for
-- them), does not count: its watches are those of the first hour of the oldest one.
SELECT
    (SELECT max(received_at) FROM events WHERE source = 'espocrm') AS last_webhook_at,
    (SELECT count(*) FROM watches
      WHERE registered_by = 'reconcile' AND registered_at >= %(since)s
        AND registered_at > (SELECT min(registered_at) FROM watches) + interval '1 hour'
    ) AS reconciled_since;

-- name: events_store_batch
-- Store the deliveries that arrived together in one call (the ingress's group commit: one
-- transaction, one commit for all), answering for each what storing them one by one in the order
-- of `ord` answers (migration 0033). The rows come as JSON arrays and their bodies as one bytea,
-- each row naming its body's place in it: a driver dumps a few documents and one buffer far
-- cheaper than ten arrays of a batch's rows.
SELECT s.ord, s.event_id, s.event_status AS status, s.duplicate
FROM store_deliveries(%(identified)s::json, %(repeated)s::json, %(rows)s::json,
                      %(bodies)s::bytea, %(window)s::interval, %(namespace)s) AS s
ORDER BY s.ord;
