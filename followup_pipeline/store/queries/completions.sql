-- name: steps_of_completed_tasks
-- The steps whose tasks are among %(task_ids)s (tasks ClickUp shows completed) and whose
-- completion is the salesperson's follow-up: the step fired with that task on a watch that is
-- open, activity has not overtaken it, Followup has no closing action for it in any state (a task
-- Followup closes, or may have closed, is no one's follow-up), and no completion of it is recorded
-- yet. With the deal, whose activity it is.
SELECT s.task_ref AS task_id, s.watch_id, s.step_no, w.subject_id
FROM watch_steps s
JOIN watches w ON w.id = s.watch_id
WHERE s.task_ref = ANY(%(task_ids)s::text[])
  AND w.closed_at IS NULL
  AND s.fired_at IS NOT NULL
  AND s.skipped_at IS NULL
  AND s.overtaken_at IS NULL
  AND NOT EXISTS (
      SELECT 1 FROM actions a
      WHERE a.idempotency_key = 'close_task:' || s.watch_id || ':' || s.step_no
  )
  AND NOT EXISTS (SELECT 1 FROM task_completions c WHERE c.task_id = s.task_ref)
ORDER BY s.watch_id, s.step_no;

-- name: record_task_completions
-- Record completions read from ClickUp (arrays in step), each at most once: a task recorded before
-- is left as it was. The task ids recorded now.
INSERT INTO task_completions (
    task_id, watch_id, step_no, status, completed_at, read_at, run_id, counted
)
SELECT c.task_id, c.watch_id, c.step_no, c.status, c.completed_at, %(read_at)s, %(run_id)s,
       c.counted
FROM unnest(
    %(task_ids)s::text[], %(watch_ids)s::bigint[], %(step_nos)s::int[], %(statuses)s::text[],
    %(completed_ats)s::timestamptz[], %(counted)s::boolean[]
) AS c(task_id, watch_id, step_no, status, completed_at, counted)
ON CONFLICT (task_id) DO NOTHING
RETURNING task_id;

-- name: task_completions_of_watch
-- The completions recorded for a watch's tasks, oldest first.
SELECT * FROM task_completions WHERE watch_id = %(watch_id)s ORDER BY completed_at, id;
