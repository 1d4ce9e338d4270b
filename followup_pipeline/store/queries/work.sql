-- name: work_known_failures
-- Of the given subjects, each item's failure on record (waiting or closed): a failure the list
-- holds already is not taken in again.
SELECT subject, failed_at FROM work_items WHERE subject = ANY(%(subjects)s);

-- name: work_lock
-- One writer of the list at a time (the alert checks, a command, a run): its sync and its
-- person's decisions do not cross.
SELECT pg_advisory_xact_lock(hashtextextended('work_items', 0));

-- name: work_found
-- Something failed: a new item, unless one waits for it or an item stood for this very failure
-- (closed since: a person decided). A waiting item replayed since its last failure takes it as
-- news: opened again, its failures counted (a learning item keeps its run's words). Failures are
-- told apart by their own moment (the event's or the action's), never compared with a clock.
WITH waiting AS (
    UPDATE work_items
    SET failures = failures + 1, failed_at = %(failed_at)s, error = %(error)s, step = %(step)s,
        reason = CASE WHEN kind IN ('reminder', 'certificate', 'publication') THEN reason
                      ELSE %(reason)s END,
        what = CASE WHEN kind IN ('reminder', 'certificate', 'publication') THEN what
                    ELSE %(what)s END,
        state = 'open', updated_at = %(at)s
    WHERE subject = %(subject)s AND state <> 'closed' AND replays >= failures
      AND failed_at <> %(failed_at)s
    RETURNING id
), present AS (
    SELECT id FROM work_items
    WHERE subject = %(subject)s AND (state <> 'closed' OR failed_at = %(failed_at)s)
), made AS (
    INSERT INTO work_items (subject, pipeline, kind, tenant_id, what, reason, step, error,
                            event_id, action_key, owner, backup, opened_at, updated_at,
                            failed_at, alerted)
    SELECT %(subject)s, %(pipeline)s, %(kind)s, %(tenant_id)s, %(what)s, %(reason)s, %(step)s,
           %(error)s, %(event_id)s, %(action_key)s, %(owner)s, %(backup)s, %(at)s, %(at)s,
           %(failed_at)s, CASE WHEN %(known)s THEN 1 ELSE 0 END
    WHERE NOT EXISTS (SELECT 1 FROM waiting) AND NOT EXISTS (SELECT 1 FROM present)
    RETURNING id
)
SELECT (SELECT count(*) FROM made)::int AS new, (SELECT count(*) FROM waiting)::int AS again;

-- name: work_park
-- An action that can be neither done nor suppressed, late (a learning action, a deal's step),
-- waits with its owner: one item while it waits (parked again, its reason and owner are brought
-- up to date), none when a person closed it with a decision.
WITH waiting AS (
    UPDATE work_items
    SET what = %(what)s, reason = %(reason)s, owner = %(owner)s, backup = %(backup)s,
        updated_at = %(at)s
    WHERE subject = %(subject)s AND state <> 'closed'
    RETURNING id
)
INSERT INTO work_items (subject, pipeline, kind, tenant_id, what, reason, action_key, owner,
                        backup, opened_at, updated_at, failed_at)
SELECT %(subject)s, %(pipeline)s, %(kind)s, %(tenant_id)s, %(what)s, %(reason)s, %(action_key)s,
       %(owner)s, %(backup)s, %(at)s, %(at)s, %(at)s
WHERE NOT EXISTS (SELECT 1 FROM waiting)
  AND NOT EXISTS (SELECT 1 FROM work_items
                  WHERE subject = %(subject)s AND closed_how = 'decided')
RETURNING id;

-- name: work_settled
-- Waiting items whose event or action ended since, by any path (a later run, reconciliation, a
-- replay): an event done (or gone), an action accepted, confirmed or suppressed (or gone). A late
-- step (its task's key task:<watch>:<step>) ends when it fires or is skipped, when activity or a
-- resume planned it again for a later day than it was parked on, or when its task's action died
-- and waits as a dead letter of its own.
SELECT w.id, w.kind, w.replays, w.failures, e.status AS event_status,
       CASE WHEN w.kind <> 'step' THEN coalesce(a.outcome, r.delivery_outcome)
            WHEN s.fired_at IS NOT NULL THEN 'fired'
            WHEN s.skip_reason IS NOT NULL THEN 'suppressed'
            WHEN d.id IS NOT NULL THEN 'handed over to its dead letter #' || d.id
            WHEN s.id IS NOT NULL THEN 'planned again for ' || s.due_on END AS action_outcome,
       CASE WHEN w.kind = 'step' THEN s.skip_reason ELSE coalesce(a.reason, r.reason) END
           AS action_reason,
       (w.event_id IS NOT NULL AND e.id IS NULL) OR (w.kind = 'dead_action' AND a.id IS NULL)
           OR (w.kind = 'step' AND s.id IS NULL) AS gone
FROM work_items w
LEFT JOIN events e ON e.id = w.event_id
LEFT JOIN actions a ON a.idempotency_key = w.action_key
-- A reminder parked before it was ever tried (its Moodle away) may end without a ledger action:
-- overtaken by a new due date at a sync.
LEFT JOIN lms_reminders r ON w.kind = 'reminder' AND r.idempotency_key = w.action_key
LEFT JOIN watch_steps s
    ON s.watch_id = CASE WHEN w.kind = 'step' THEN split_part(w.action_key, ':', 2)::bigint END
   AND s.step_no = CASE WHEN w.kind = 'step' THEN split_part(w.action_key, ':', 3)::int END
LEFT JOIN watches sw ON sw.id = s.watch_id
LEFT JOIN LATERAL (
    SELECT id FROM work_items dl
    WHERE w.kind = 'step' AND dl.subject = 'action:' || w.action_key AND dl.state <> 'closed'
      AND dl.kind = 'dead_action'
    LIMIT 1
) d ON true
WHERE w.state <> 'closed'
  AND ((w.event_id IS NOT NULL AND e.id IS NULL)
       OR (w.kind = 'dead_event' AND e.status = 'done')
       OR (w.kind = 'dead_action' AND a.id IS NULL)
       OR (w.kind NOT IN ('dead_event', 'invalid_item', 'step')
           AND a.outcome IN ('accepted', 'confirmed', 'suppressed'))
       OR (w.kind = 'reminder' AND a.id IS NULL
           AND r.delivery_outcome IN ('accepted', 'confirmed', 'suppressed'))
       OR (w.kind = 'step'
           AND (s.id IS NULL OR s.fired_at IS NOT NULL OR s.skip_reason IS NOT NULL
                OR d.id IS NOT NULL
                OR s.due_on > (w.failed_at AT TIME ZONE sw.time_zone)::date)));

-- name: work_close
-- Close waiting items, with how (and, for a person's decision, who and why).
UPDATE work_items
SET state = 'closed', closed_at = %(at)s, closed_how = %(how)s, closed_by = %(by)s,
    closed_note = %(note)s, updated_at = %(at)s
WHERE id = ANY(%(ids)s) AND state <> 'closed'
RETURNING id, subject, kind, action_key;

-- name: work_close_subject
-- The action a learning run parked was done or settled: its waiting item closes, with how.
UPDATE work_items
SET state = 'closed', closed_at = %(at)s, closed_how = %(how)s, closed_note = %(note)s,
    updated_at = %(at)s
WHERE subject = %(subject)s AND state <> 'closed'
RETURNING id;

-- name: work_acknowledge
-- A person has seen the items and owns them: they wait, acknowledged, and alert no more.
UPDATE work_items
SET state = 'acknowledged', acknowledged_by = %(by)s, acknowledged_at = %(at)s,
    alerted = failures, updated_at = %(at)s
WHERE id = ANY(%(ids)s) AND state = 'open'
RETURNING id;

-- name: work_replayed
-- A person replayed the items: counted, with who and when (closed as replayed once they end).
UPDATE work_items
SET replays = replays + 1, replayed_by = %(by)s, replayed_at = %(at)s, updated_at = %(at)s
WHERE id = ANY(%(ids)s) AND state <> 'closed'
RETURNING id;

-- name: work_select
-- The items a selection names, waiting ones first, oldest first.
SELECT * FROM work_items
WHERE state = ANY(%(states)s)
  AND (cardinality(%(ids)s::bigint[]) = 0 OR id = ANY(%(ids)s))
  AND (cardinality(%(names)s::text[]) = 0 OR subject = ANY(%(names)s))
  AND (%(pipeline)s::text IS NULL OR pipeline = %(pipeline)s)
  AND (cardinality(%(kinds)s::text[]) = 0 OR kind = ANY(%(kinds)s))
  AND (%(step)s::text IS NULL OR step = %(step)s)
  AND (%(error)s::text IS NULL OR strpos(lower(coalesce(error, reason)), lower(%(error)s)) > 0)
  AND (%(owner)s::text IS NULL OR lower(owner) = lower(%(owner)s)
       OR lower(backup) = lower(%(owner)s))
  AND (%(since)s::timestamptz IS NULL OR failed_at >= %(since)s)
  AND (%(tenant)s::text IS NULL OR tenant_id = %(tenant)s)
  AND (%(subject)s::text IS NULL OR strpos(lower(subject), lower(%(subject)s)) > 0)
ORDER BY state = 'closed', opened_at, id
LIMIT %(limit)s;

-- name: work_to_alert
-- Open items with a failure not alerted yet, oldest first.
SELECT * FROM work_items WHERE state = 'open' AND alerted < failures ORDER BY opened_at, id;

-- name: work_mark_alerted
-- The item's failures so far are alerted (each once).
UPDATE work_items SET alerted = %(failures)s WHERE id = %(id)s AND alerted < %(failures)s;

-- name: work_closed_items
-- Which of the given items are closed (an alert about only closed items goes nowhere).
SELECT id FROM work_items WHERE id = ANY(%(ids)s) AND state = 'closed';

-- name: work_counts
-- The waiting items by pipeline, kind, owner and state (the gauges, the weekly mails, doctor).
SELECT pipeline, kind, owner, state, tenant_id, count(*)::int AS items, min(opened_at) AS oldest
FROM work_items WHERE state <> 'closed'
GROUP BY pipeline, kind, owner, state, tenant_id
ORDER BY pipeline, kind, owner, state, tenant_id;

-- name: work_closed_between
-- How many items closed in a window, by how (a weekly mail's line).
SELECT closed_how AS how, count(*)::int AS items FROM work_items
WHERE closed_at >= %(since)s AND closed_at < %(until)s AND (%(pipeline)s::text IS NULL OR pipeline = %(pipeline)s)
GROUP BY closed_how ORDER BY closed_how;

-- name: work_open_subjects
-- The subjects of a tenant's waiting items of a kind (a learning run leaves them be).
SELECT action_key FROM work_items
WHERE tenant_id = %(tenant_id)s AND kind = %(kind)s AND state <> 'closed'
  AND action_key IS NOT NULL;
