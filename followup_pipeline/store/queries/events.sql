-- name: events_dedup_lock
-- Serialise concurrent deliveries of the same body: a transaction lock on the dedup key's hash
-- (the two-integer form, in a namespace of its own, so it never meets another advisory lock).
SELECT pg_advisory_xact_lock(%(namespace)s, hashtext(%(dedup_key)s));

-- name: events_count_duplicate
-- A redelivery within the window: count it on the latest event with the same dedup key.
UPDATE events
SET duplicate_count = duplicate_count + 1, last_duplicate_at = now()
WHERE id = (
    SELECT id FROM events
    WHERE dedup_key = %(dedup_key)s AND received_at > now() - %(window)s::interval
    ORDER BY received_at DESC, id DESC
    LIMIT 1
)
RETURNING id, status;

-- name: events_insert
-- One delivery, raw bytes kept; status pending, unhandled, or dead (signed but unparseable).
INSERT INTO events (source, event_type, dedup_key, body, headers, status, last_error, dead_step)
VALUES (
    %(source)s, %(event_type)s, %(dedup_key)s, %(body)s, %(headers)s, %(status)s,
    %(last_error)s, %(dead_step)s
)
RETURNING id, status;

-- name: events_claim
-- Claim due events of the handled sources; concurrent runs skip each other's claims.
SELECT * FROM events
WHERE status = 'pending' AND next_attempt_at <= now() AND source = ANY(%(sources)s::text[])
  AND NOT (id = ANY(%(exclude)s::bigint[]))
ORDER BY id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: events_claim_ids
-- Claim named pending events (a replay), whatever their next attempt time.
SELECT * FROM events
WHERE status = 'pending' AND id = ANY(%(ids)s::bigint[])
ORDER BY id
FOR UPDATE SKIP LOCKED;

-- name: events_due
-- What the sensor looks at: the due events (ids and attempts), oldest first.
SELECT id, attempts FROM events
WHERE status = 'pending' AND next_attempt_at <= now() AND source = ANY(%(sources)s::text[])
ORDER BY id
LIMIT %(limit)s;

-- name: events_mark_done
-- Every item of the event is done.
UPDATE events SET status = 'done', processed_at = now(), dead_step = NULL
WHERE id = %(id)s;

-- name: events_mark_retry
-- A failed attempt: count it and wait before the next one.
UPDATE events
SET attempts = attempts + 1, last_error = %(error)s, dead_step = %(step)s,
    next_attempt_at = now() + %(delay)s::interval
WHERE id = %(id)s;

-- name: events_mark_dead
-- The last attempt failed: a dead letter with its step and last error.
UPDATE events
SET attempts = attempts + 1, status = 'dead', last_error = %(error)s, dead_step = %(step)s,
    processed_at = now()
WHERE id = %(id)s;

-- name: events_requeue
-- Replay: back to pending under its original id, with fresh attempts.
UPDATE events
SET status = 'pending', attempts = 0, next_attempt_at = now(), processed_at = NULL
WHERE id = %(id)s AND status IN ('dead', 'unhandled')
RETURNING id;

-- name: step_completion
-- Whether one step of one item of an event is done ({event_id}:{item}:{step}).
SELECT key, result FROM step_completions WHERE key = %(key)s;

-- name: step_completion_insert
-- Record a finished step; a second record of the same key changes nothing.
INSERT INTO step_completions (key, event_id, result)
VALUES (%(key)s, %(event_id)s, %(result)s)
ON CONFLICT (key) DO NOTHING;

-- name: step_completions_of_event
-- The finished steps of one event, in order.
SELECT key, completed_at, result FROM step_completions
WHERE event_id = %(event_id)s ORDER BY completed_at, key;

-- name: event_by_id
-- One event, whole.
SELECT * FROM events WHERE id = %(id)s;

-- name: events_dead_letters
-- Dead-lettered events, oldest first.
SELECT id, source, event_type, received_at, attempts, dead_step, last_error
FROM events WHERE status = 'dead' ORDER BY id;

-- name: events_gauges
-- For /metrics: the dead-letter count and the age in seconds of the oldest pending event.
SELECT
    (SELECT count(*) FROM events WHERE status = 'dead') AS dead,
    (SELECT count(*) FROM events WHERE status = 'pending') AS pending,
    (SELECT extract(epoch FROM now() - min(received_at)) FROM events WHERE status = 'pending')
        AS oldest_pending_s;

-- name: actions_failed
-- Dead actions: failed with no attempt left since the last replay, oldest change first.
SELECT idempotency_key, kind, watch_id, step_no, due_at, attempts, last_error, updated_at
FROM actions
WHERE outcome = 'failed' AND attempts - replayed_attempts >= %(max_attempts)s
ORDER BY updated_at, id;

-- name: action_replay
-- Give a dead action a fresh budget of attempts; the next evaluate run carries it out.
UPDATE actions SET replayed_attempts = attempts, updated_at = now()
WHERE idempotency_key = %(key)s AND outcome = 'failed'
RETURNING id;

-- name: database_ping
-- The health check: the database answers.
SELECT 1 AS ok;
