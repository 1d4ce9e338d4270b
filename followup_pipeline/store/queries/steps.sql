-- name: open_watches
-- Every open watch, oldest first.
SELECT * FROM watches WHERE closed_at IS NULL ORDER BY registered_at, id;

-- name: count_open_watches
-- How many watches are open.
SELECT count(*) AS n FROM watches WHERE closed_at IS NULL;

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

-- name: mark_reset
-- Remember when a watch's cadence was last reset by activity.
UPDATE watches SET last_reset_at = %(reset_at)s WHERE id = %(watch_id)s;

-- name: set_paused
-- Pause (an instant) or resume (NULL) an open watch.
UPDATE watches SET paused_at = %(paused_at)s WHERE id = %(watch_id)s AND closed_at IS NULL
RETURNING id;

-- name: watch_by_id
-- One watch.
SELECT * FROM watches WHERE id = %(watch_id)s;

-- name: latest_summary
-- The newest two-line summary of a deal, if any.
SELECT line1, line2, created_at FROM enrichments
WHERE subject_type = %(subject_type)s AND subject_id = %(subject_id)s
ORDER BY created_at DESC, id DESC
LIMIT 1;

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

-- name: set_watch_error
-- Remember (or clear, with NULL) the CRM error that holds a watch's due step back.
UPDATE watches SET last_error = %(error)s, last_error_at = %(at)s WHERE id = %(watch_id)s;

-- name: actions_of_watch
-- The task actions of a watch, by step.
SELECT * FROM actions WHERE watch_id = %(watch_id)s AND kind = 'task' ORDER BY step_no;

-- name: list_watches
-- Watches for the operator: open ones, or all, newest first.
SELECT w.*, (
    SELECT min(s.due_on) FROM watch_steps s
    WHERE s.watch_id = w.id AND s.fired_at IS NULL AND s.skipped_at IS NULL
) AS next_due_on
FROM watches w
WHERE %(all)s OR w.closed_at IS NULL
ORDER BY w.registered_at DESC, w.id DESC
LIMIT %(limit)s;

-- name: refresh_subject
-- Copy the CRM's current names onto a watch and clear the error that held it back.
UPDATE watches
SET subject_name = %(name)s, account_name = %(account_name)s,
    assigned_user_id = %(assigned_user_id)s, assigned_user_name = %(assigned_user_name)s,
    stage = %(stage)s, last_error = NULL, last_error_at = NULL
WHERE id = %(watch_id)s;
