-- name: action_by_key
-- One action of the ledger by its idempotency key.
SELECT * FROM actions WHERE idempotency_key = %(key)s;

-- name: begin_action_attempt
-- Mark an action attempted (creating it if new) before the provider is called. Actions that
-- reached the provider (accepted, confirmed) are left alone: nothing comes back then.
INSERT INTO actions (idempotency_key, kind, watch_id, step_no, due_at, time_zone, outcome,
                     payload, attempts)
VALUES (%(key)s, %(kind)s, %(watch_id)s, %(step_no)s, %(due_at)s, %(time_zone)s, 'attempted',
        %(payload)s, 1)
ON CONFLICT (idempotency_key) DO UPDATE
    SET outcome = 'attempted', reason = NULL, attempts = actions.attempts + 1,
        payload = EXCLUDED.payload, updated_at = now()
    WHERE actions.outcome IN ('attempted', 'unknown', 'failed', 'suppressed')
RETURNING id, attempts;

-- name: insert_attempt
-- Keep every attempt at an action.
INSERT INTO action_attempts (action_id, attempt_no, started_at, outcome, run_id)
VALUES (%(action_id)s, %(attempt_no)s, %(started_at)s, 'attempted', %(run_id)s);

-- name: finish_action
-- Record the outcome of an attempt on the action itself.
UPDATE actions
SET outcome = %(outcome)s, provider_ref = coalesce(%(provider_ref)s, provider_ref),
    last_error = %(error)s, updated_at = now()
WHERE id = %(action_id)s;

-- name: finish_attempt
-- Record the outcome of one attempt.
UPDATE action_attempts
SET outcome = %(outcome)s, finished_at = %(finished_at)s, provider_ref = %(provider_ref)s,
    error = %(error)s
WHERE action_id = %(action_id)s AND attempt_no = %(attempt_no)s;

-- name: suppress_action
-- Record an action that is deliberately not carried out, with its reason. One that already
-- reached the provider keeps its outcome.
INSERT INTO actions (idempotency_key, kind, watch_id, step_no, due_at, time_zone, outcome,
                     reason, payload)
VALUES (%(key)s, %(kind)s, %(watch_id)s, %(step_no)s, %(due_at)s, %(time_zone)s, 'suppressed',
        %(reason)s, %(payload)s)
ON CONFLICT (idempotency_key) DO UPDATE
    SET outcome = 'suppressed', reason = EXCLUDED.reason, updated_at = now()
    WHERE actions.outcome NOT IN ('accepted', 'confirmed')
RETURNING id;

-- name: actions_of_watch
-- The task actions of a watch, by step.
SELECT * FROM actions WHERE watch_id = %(watch_id)s AND kind = 'task' ORDER BY step_no;

-- name: actions_failed
-- Dead actions: failed with no attempt left since the last replay, oldest change first. A CRM
-- Lead write is left out: its event is the dead letter, retried and replayed with its steps.
SELECT * FROM actions
WHERE outcome = 'failed' AND attempts - replayed_attempts >= %(max_attempts)s
  AND kind <> 'crm_lead'
ORDER BY updated_at, id;

-- name: action_replay
-- Give a dead action a fresh budget of attempts; the next evaluate run carries it out.
UPDATE actions SET replayed_attempts = attempts, updated_at = now()
WHERE idempotency_key = %(key)s AND outcome = 'failed'
RETURNING id;

-- name: action_decided
-- A person closed a dead action with a reason (the work list): suppressed, by a decision; its
-- attempts stay on the record.
UPDATE actions SET outcome = 'suppressed', reason = 'decided', updated_at = now()
WHERE idempotency_key = %(key)s AND outcome = 'failed'
RETURNING id;

-- name: action_age
-- Seconds since an action last changed, by the database's real time (clock_timestamp(), not a
-- simulated clock): how long its last request may still be on its way.
SELECT extract(epoch FROM clock_timestamp() - updated_at)::float8 AS age_s
FROM actions WHERE id = %(id)s;

-- name: action_touch
-- Stamp an action with the database's real time just before its request goes out, so that the
-- in-flight window starts when the request leaves (not before a slow search that preceded it).
UPDATE actions SET updated_at = clock_timestamp() WHERE id = %(id)s;

-- name: action_confirm
-- The provider's object was read back: an accepted action is confirmed.
UPDATE actions SET outcome = 'confirmed', provider_ref = coalesce(%(provider_ref)s, provider_ref),
                   updated_at = now()
WHERE idempotency_key = %(key)s AND outcome IN ('accepted', 'confirmed')
RETURNING id;
