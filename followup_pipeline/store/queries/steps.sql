-- name: steps_of_watch
-- Every step of a watch, in order.
SELECT * FROM watch_steps WHERE watch_id = %(watch_id)s ORDER BY step_no;

-- name: fire_step
-- Mark a step fired with its task (a ClickUp id, or 'dry-run'); only an open step.
UPDATE watch_steps SET fired_at = %(fired_at)s, task_ref = %(task_ref)s
WHERE watch_id = %(watch_id)s AND step_no = %(step_no)s
  AND fired_at IS NULL AND skipped_at IS NULL
RETURNING id;

-- name: skip_step
-- Mark an open step skipped, with its reason.
UPDATE watch_steps SET skipped_at = %(skipped_at)s, skip_reason = %(reason)s
WHERE watch_id = %(watch_id)s AND step_no = %(step_no)s
  AND fired_at IS NULL AND skipped_at IS NULL
RETURNING id;

-- name: replan_step
-- Plan a step that has not fired again (clearing a skip for 'paused').
UPDATE watch_steps SET due_on = %(due_on)s, skipped_at = NULL, skip_reason = NULL
WHERE watch_id = %(watch_id)s AND step_no = %(step_no)s AND fired_at IS NULL
RETURNING id;

-- name: tasks_to_close
-- Fired tasks of closed watches that have no closing action yet.
SELECT w.id AS watch_id, w.closed_reason, w.closed_at, w.time_zone, s.step_no, s.task_ref
FROM watches w
JOIN watch_steps s ON s.watch_id = w.id
WHERE w.closed_at IS NOT NULL
  AND s.fired_at IS NOT NULL AND s.task_ref <> 'dry-run'
  AND NOT EXISTS (
      SELECT 1 FROM actions a
      WHERE a.idempotency_key = 'close_task:' || w.id || ':' || s.step_no
        AND a.outcome IN ('accepted', 'confirmed', 'suppressed')
  )
ORDER BY w.id, s.step_no;

-- name: open_steps_of_closed_watches
-- Steps left open on watches that closed (their skip had to wait: ClickUp could not tell, or a
-- create was still on its way), oldest first: each is settled before it is skipped.
SELECT s.watch_id, s.step_no, s.due_on
FROM watch_steps s
JOIN watches w ON w.id = s.watch_id
WHERE w.closed_at IS NOT NULL AND s.fired_at IS NULL AND s.skipped_at IS NULL
ORDER BY s.watch_id, s.step_no;
