-- name: operator_gauges
-- What an operator graphs, one row a series (docs/operations.md, Metrics): overdue steps of open
-- watches not paused (due before today in their zone, neither fired nor skipped), actions waiting
-- in the in-flight window (attempted or unknown) or dead (failed with no attempt left since their
-- last replay), alerts that reached nobody, the age of the last finished evaluate, and the open
-- watches by stage.
SELECT 'steps_overdue' AS name, '' AS label, count(*)::float8 AS value
FROM watch_steps s JOIN watches w ON w.id = s.watch_id
WHERE w.closed_at IS NULL AND w.paused_at IS NULL AND s.fired_at IS NULL
  AND s.skipped_at IS NULL AND s.due_on < (now() AT TIME ZONE w.time_zone)::date
UNION ALL
SELECT 'actions', 'in_flight', count(*)::float8 FROM actions
WHERE outcome IN ('attempted', 'unknown')
UNION ALL
SELECT 'actions', 'dead', count(*)::float8 FROM actions
WHERE outcome = 'failed' AND attempts - replayed_attempts >= %(max_attempts)s
UNION ALL
SELECT 'alerts_unsent', '', count(DISTINCT a.action_key)::float8
FROM alerts a
LEFT JOIN actions m ON m.idempotency_key = a.action_key
LEFT JOIN actions c ON c.idempotency_key = a.action_key || ':clickup'
WHERE a.action_key IS NOT NULL
  AND (m.outcome IS NULL OR m.outcome NOT IN ('accepted', 'confirmed', 'suppressed'))
  AND (c.outcome IS NULL OR c.outcome NOT IN ('accepted', 'confirmed', 'suppressed'))
UNION ALL
SELECT 'evaluate_age', '', extract(epoch FROM now() - position)::float8 FROM job_cursors
WHERE name = 'evaluate_finished'
UNION ALL
(SELECT 'watches_open', stage, count(*)::float8 FROM watches WHERE closed_at IS NULL
 GROUP BY stage ORDER BY stage);
