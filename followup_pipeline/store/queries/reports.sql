-- name: morning_steps
-- The morning list's steps of open watches: `today`, due on the day; `overdue`, due before the
-- day, still without a task or its task created since the day began (a catch-up task; for a list
-- rendered after its day, up to when it is rendered: no task falls between two lists). Overdue
-- means due before the day, wherever its task was made: the header, the rows and the task agree. A step without a task says why it waits (paused, its task a dead letter, a
-- CRM error, or the next run).
-- Names, stage and amount are the watch's copies and the summary its deal's newest: the list
-- reads without the CRM.
SELECT w.subject_id AS deal_id, w.subject_name AS deal_name, w.account_name,
       w.assigned_user_id AS owner_id, w.assigned_user_name AS owner, w.stage, w.amount,
       w.amount_currency AS currency, s.step_no,
       (SELECT count(*) FROM watch_steps t WHERE t.watch_id = w.id)::int AS step_count,
       s.due_on,
       CASE WHEN s.due_on >= %(day)s THEN 'today' ELSE 'overdue' END AS section,
       w.crm_url,
       -- The task's own url as ClickUp answered it (a step fired before it was kept: ClickUp's).
       coalesce(s.task_url,
                CASE WHEN s.task_ref <> 'dry-run' THEN %(task_url_prefix)s || s.task_ref END)
           AS task_url,
       w.last_reset_kind AS contact_kind, w.last_reset_at AS contact_at, w.base_on AS started_on,
       e.line1 AS summary_line1, e.line2 AS summary_line2,
       CASE WHEN s.fired_at IS NOT NULL THEN NULL
            WHEN w.paused_at IS NOT NULL THEN 'paused'
            WHEN a.outcome = 'failed' AND a.attempts - a.replayed_attempts >= %(max_attempts)s
                THEN 'dead_letter'
            WHEN w.last_error IS NOT NULL THEN 'crm_error'
            WHEN s.due_on = %(day)s THEN NULL
            ELSE 'waiting' END AS reason
FROM watch_steps s
JOIN watches w ON w.id = s.watch_id
LEFT JOIN actions a ON a.idempotency_key = 'task:' || w.id || ':' || s.step_no
LEFT JOIN LATERAL (
    SELECT line1, line2 FROM enrichments n
    WHERE n.subject_type = w.subject_type AND n.subject_id = w.subject_id
      AND n.created_at <= %(until)s
    ORDER BY n.created_at DESC, n.id DESC LIMIT 1
) e ON true
WHERE w.closed_at IS NULL
  -- A paused watch's due steps are skipped `paused` by evaluate: they still wait, and show.
  AND (s.skipped_at IS NULL OR (s.skip_reason = 'paused' AND w.paused_at IS NOT NULL))
  AND ((s.due_on = %(day)s AND (s.fired_at IS NULL OR s.fired_at >= %(day_start)s))
       OR (s.due_on < %(day)s
           AND (s.fired_at IS NULL
                OR (s.fired_at >= %(day_start)s AND s.fired_at <= %(until)s))))
ORDER BY s.due_on, w.subject_name, s.step_no;

-- name: morning_summaries
-- Each deal's newest summary written since the last list, for its open watch.
SELECT DISTINCT ON (e.subject_id)
       w.subject_id AS deal_id, w.subject_name AS deal_name, w.assigned_user_id AS owner_id,
       w.assigned_user_name AS owner, e.line1, e.line2, w.crm_url, e.created_at AS written_at
FROM enrichments e
JOIN watches w ON w.subject_type = e.subject_type AND w.subject_id = e.subject_id
                  AND w.closed_at IS NULL
WHERE e.created_at > %(since)s AND e.created_at <= %(until)s
ORDER BY e.subject_id, e.created_at DESC, e.id DESC;

-- name: morning_closed
-- Watches closed since the last list, with the reason.
SELECT subject_id AS deal_id, subject_name AS deal_name, assigned_user_id AS owner_id,
       assigned_user_name AS owner, closed_reason AS reason, closed_at
FROM watches
WHERE closed_at > %(since)s AND closed_at <= %(until)s
ORDER BY closed_at, id;

-- name: last_reports_sent
-- Up to when the last report of this kind that reached Graph was rendered, per recipient (the
-- "since" of each one's next list): the moment its data was read, kept with the action, not when
-- it was settled. `recipient` is the key's part after the window (`to:{user}`, or '' for the
-- team's), a forced send's `#n` left out.
SELECT coalesce(substring(idempotency_key FROM '^report:[a-z]+:[0-9-]+:(to:[^#]+)'), '')
           AS recipient,
       max((payload->>'until')::timestamptz) AS sent_at
FROM actions
WHERE kind = 'report' AND idempotency_key LIKE %(prefix)s AND outcome IN ('accepted', 'confirmed')
  AND payload ? 'until' AND (payload->>'until')::timestamptz <= %(now)s
GROUP BY 1;

-- name: report_keys
-- A report window's actions: its key and the forced ones (key#n), with the run lineage that
-- made each (a run and its retries share their root run id).
SELECT idempotency_key AS key, outcome, payload->>'root_run_id' AS root_run_id FROM actions
WHERE idempotency_key = %(key)s OR idempotency_key LIKE %(forced)s ESCAPE '!'
ORDER BY id;

-- name: dead_letter_count
-- The dead letters of the deal follow-up and lead intake waiting in the work list for a person
-- (open or acknowledged; the learning reminders' go to their tenants' owners).
SELECT count(*) AS dead FROM work_items
WHERE state <> 'closed' AND pipeline <> 'learning'
  AND kind IN ('dead_event', 'dead_action', 'invalid_item');

-- name: weekly_counts
-- The week's steps fired, watches opened, in [start, until).
SELECT
    (SELECT count(*) FROM watch_steps
      WHERE fired_at >= %(start)s AND fired_at < %(until)s AND task_ref <> 'dry-run') AS fired,
    (SELECT count(*) FROM watches
      WHERE registered_at >= %(start)s AND registered_at < %(until)s) AS opened;

-- name: weekly_skipped
SELECT skip_reason AS reason, count(*) AS n FROM watch_steps
WHERE skipped_at >= %(start)s AND skipped_at < %(until)s
GROUP BY skip_reason;

-- name: weekly_closed
SELECT closed_reason AS reason, count(*) AS n FROM watches
WHERE closed_at >= %(start)s AND closed_at < %(until)s
GROUP BY closed_reason;

-- name: weekly_open_by_stage
-- Open watches by stage, with their average and longest age at %(until)s, both in whole days
-- since the follow-up began (its base date), so that the average never exceeds the longest.
SELECT stage, count(*)::int AS count,
       round(avg(age)::numeric, 1)::float AS average_age_days,
       max(age)::int AS oldest_age_days
FROM (
    SELECT stage, ((%(until)s AT TIME ZONE time_zone)::date - base_on) AS age
    FROM watches WHERE closed_at IS NULL AND registered_at < %(until)s
) open_watches
GROUP BY stage ORDER BY stage;

-- name: weekly_tasks_per_day
-- Tasks created per local day of the week.
SELECT (fired_at AT TIME ZONE %(zone)s)::date AS day, count(*) AS n FROM watch_steps
WHERE fired_at >= %(start)s AND fired_at < %(until)s AND task_ref <> 'dry-run'
GROUP BY 1;

-- name: weekly_dead_letters
-- Items of the work list (the deal follow-up's and lead intake's dead letters) that last failed
-- in [start, until) and were not closed by a person. A CRM Lead write is counted with its event.
SELECT count(*) AS dead FROM work_items
WHERE pipeline <> 'learning' AND kind IN ('dead_event', 'dead_action', 'invalid_item')
  AND failed_at >= %(start)s AND failed_at < %(until)s
  AND closed_how IS DISTINCT FROM 'decided';

-- name: weekly_leads_in
-- The week's lead events, by source and priority (NULL: not classified by the week's end), in
-- [start, until); sources in the order given.
SELECT e.source, c.priority, count(*)::int AS n
FROM lead_events e
LEFT JOIN lead_classifications c ON c.event_id = e.event_id AND c.created_at < %(until)s
WHERE e.received_at >= %(start)s AND e.received_at < %(until)s
  AND e.source = ANY(%(sources)s::text[])
GROUP BY e.source, c.priority
ORDER BY array_position(%(sources)s::text[], e.source), c.priority NULLS LAST;

-- name: weekly_leads_figures
-- The people first seen in [start, until); the lead events whose classification waits for a
-- review now, of those that went to review before the week's end; whether any lead was taken
-- in before the week's end.
SELECT
    (SELECT count(*) FROM leads
      WHERE first_seen_at >= %(start)s AND first_seen_at < %(until)s)::int AS new_people,
    (SELECT count(*) FROM review_items
      WHERE subject_type = 'LeadEvent' AND resolved_at IS NULL
        AND created_at < %(until)s)::int AS in_review,
    EXISTS (SELECT 1 FROM lead_events WHERE received_at < %(until)s) AS ever;

-- name: weekly_lead_crm
-- The CRM writes of leads (the ledger's `crm_lead` actions) created in [start, until), by
-- outcome and reason.
SELECT outcome, reason, count(*)::int AS n FROM actions
WHERE kind = 'crm_lead' AND created_at >= %(start)s AND created_at < %(until)s
GROUP BY outcome, reason;

-- name: weekly_lead_stuck
-- Lead events that are dead letters now, of those that died before the week's end, by the step
-- they stopped at. (A replay puts an event back to pending and leaves no mark of itself: what
-- was replayed is not told apart from what never died.)
SELECT dead_step AS step, count(*)::int AS n FROM events
WHERE status = 'dead' AND source = ANY(%(sources)s::text[])
  AND coalesce(processed_at, received_at) < %(until)s
GROUP BY dead_step;
