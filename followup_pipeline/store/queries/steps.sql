-- name: steps_of_watch
-- Every step of a watch, in order.
SELECT * FROM watch_steps WHERE watch_id = %(watch_id)s ORDER BY step_no;

-- name: fire_step
-- Mark a step fired with its task (a ClickUp id, or 'dry-run'), the task's own address (its `url`
-- in ClickUp's answer, when known) and the summary (input hash) it was written with; only an
-- open step.
UPDATE watch_steps
SET fired_at = %(fired_at)s, task_ref = %(task_ref)s, task_url = %(task_url)s,
    task_summary = %(task_summary)s
WHERE watch_id = %(watch_id)s AND step_no = %(step_no)s
  AND fired_at IS NULL AND skipped_at IS NULL
RETURNING id;

-- name: skip_step
-- Mark an open step skipped, with its reason.
UPDATE watch_steps SET skipped_at = %(skipped_at)s, skip_reason = %(reason)s
WHERE watch_id = %(watch_id)s AND step_no = %(step_no)s
  AND fired_at IS NULL AND skipped_at IS NULL
RETURNING id;

-- name: skip_steps_through
-- Mark a step and every open step before it skipped, with one reason.
UPDATE watch_steps SET skipped_at = %(skipped_at)s, skip_reason = %(reason)s
WHERE watch_id = %(watch_id)s AND step_no <= %(step_no)s
  AND fired_at IS NULL AND skipped_at IS NULL
RETURNING id;

-- name: replan_step
-- Plan a step that has not fired again (clearing a skip for 'paused').
UPDATE watch_steps SET due_on = %(due_on)s, skipped_at = NULL, skip_reason = NULL
WHERE watch_id = %(watch_id)s AND step_no = %(step_no)s AND fired_at IS NULL
RETURNING id;

-- name: tasks_to_close
-- Tasks in ClickUp that are to be closed and have no closing action done yet (accepted,
-- confirmed, or suppressed in a dry run), each with why, in this order: a later step of its watch
-- has a task of its own (superseded) or activity overtook it (the cadence was reset), on an open
-- watch; its watch closed (only when %(on_watch_close)s).
SELECT s.watch_id, s.step_no, s.task_ref, w.time_zone, w.closed_reason, w.closed_at,
       s.overtaken_at, s.overtaken_by, later.step_no AS superseded_by, s.fired_at,
       (SELECT count(*) FROM watch_steps n WHERE n.watch_id = s.watch_id)::int AS step_count
FROM watch_steps s
JOIN watches w ON w.id = s.watch_id
LEFT JOIN LATERAL (
    SELECT l.step_no FROM watch_steps l
    WHERE l.watch_id = s.watch_id AND l.step_no > s.step_no
      AND l.fired_at IS NOT NULL AND l.task_ref <> 'dry-run'
    ORDER BY l.step_no DESC
    LIMIT 1
) later ON true
WHERE s.fired_at IS NOT NULL AND s.task_ref <> 'dry-run'
  AND (((later.step_no IS NOT NULL OR s.overtaken_at IS NOT NULL) AND w.closed_at IS NULL)
       OR (w.closed_at IS NOT NULL AND %(on_watch_close)s::boolean))
  AND NOT EXISTS (
      SELECT 1 FROM actions a
      WHERE a.idempotency_key = 'close_task:' || s.watch_id || ':' || s.step_no
        AND a.outcome IN ('accepted', 'confirmed', 'suppressed')
  )
ORDER BY s.watch_id, s.step_no;

-- name: tasks_to_update
-- The open task of each open watch (its latest fired step, not overtaken, not closed by us) whose
-- deal has a newer summary than the one the task was written with, and no update to that summary
-- done yet (accepted, confirmed, or suppressed in a dry run); with the summary and the number of
-- the watch's steps.
SELECT w.id AS watch_id, s.step_no, s.due_on, s.task_ref, e.input_hash AS summary_hash,
       e.line1, e.line2,
       (SELECT count(*) FROM watch_steps n WHERE n.watch_id = w.id)::int AS step_count
FROM watches w
JOIN LATERAL (
    SELECT f.step_no, f.due_on, f.task_ref, f.task_summary, f.overtaken_at FROM watch_steps f
    WHERE f.watch_id = w.id AND f.fired_at IS NOT NULL
    ORDER BY f.step_no DESC
    LIMIT 1
) s ON true
JOIN LATERAL (
    SELECT n.input_hash, n.line1, n.line2 FROM enrichments n
    WHERE n.subject_type = w.subject_type AND n.subject_id = w.subject_id
    ORDER BY n.created_at DESC, n.id DESC
    LIMIT 1
) e ON true
WHERE w.closed_at IS NULL AND s.task_ref <> 'dry-run' AND s.overtaken_at IS NULL
  AND e.input_hash IS DISTINCT FROM s.task_summary
  AND NOT EXISTS (
      SELECT 1 FROM actions a
      WHERE a.idempotency_key = 'close_task:' || w.id || ':' || s.step_no
        AND a.outcome IN ('accepted', 'confirmed', 'suppressed')
  )
  AND NOT EXISTS (
      SELECT 1 FROM actions a
      WHERE a.idempotency_key = 'task_update:' || w.id || ':' || s.step_no || ':'
                                || left(e.input_hash, 12)
        AND a.outcome IN ('accepted', 'confirmed', 'suppressed')
  )
ORDER BY w.id;

-- name: set_task_summary
-- The summary (input hash) a step's task now shows.
UPDATE watch_steps SET task_summary = %(task_summary)s
WHERE watch_id = %(watch_id)s AND step_no = %(step_no)s;

-- name: newest_summary
-- The newest two-line summary of a deal, with its input hash (what a task is written with).
SELECT input_hash, line1, line2 FROM enrichments
WHERE subject_type = %(subject_type)s AND subject_id = %(subject_id)s
ORDER BY created_at DESC, id DESC
LIMIT 1;

-- name: record_contact
-- What reset a watch's cadence (an e-mail, a call, a meeting, a task completed in ClickUp),
-- beside its last_reset_at.
UPDATE watches SET last_reset_kind = %(kind)s WHERE id = %(watch_id)s;

-- name: last_contact
-- A watch's last contact as the machine knows it: the activity that last reset its cadence (when,
-- and what it was), and the day its cadence began.
SELECT last_reset_at, last_reset_kind, base_on FROM watches WHERE id = %(watch_id)s;

-- name: mark_overtaken
-- Activity overtook the tasks of a watch that are not closed yet (no closing action done, none
-- marked already): they are to be closed saying what happened. The steps marked.
UPDATE watch_steps s SET overtaken_at = %(at)s, overtaken_by = %(kind)s
WHERE s.watch_id = %(watch_id)s AND s.fired_at IS NOT NULL AND s.task_ref <> 'dry-run'
  AND s.overtaken_at IS NULL
  AND NOT EXISTS (
      SELECT 1 FROM actions a
      WHERE a.idempotency_key = 'close_task:' || s.watch_id || ':' || s.step_no
        AND a.outcome IN ('accepted', 'confirmed', 'suppressed')
  )
RETURNING s.step_no;

-- name: open_steps_of_closed_watches
-- Steps left open on watches that closed (their skip had to wait: ClickUp could not tell, or a
-- create was still on its way), oldest first: each is settled before it is skipped.
SELECT s.watch_id, s.step_no, s.due_on
FROM watch_steps s
JOIN watches w ON w.id = s.watch_id
WHERE w.closed_at IS NOT NULL AND s.fired_at IS NULL AND s.skipped_at IS NULL
ORDER BY s.watch_id, s.step_no;
