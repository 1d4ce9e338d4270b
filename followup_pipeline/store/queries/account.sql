-- name: account_steps
-- (A step is late from its due moment, or from its watch's opening if that came later.)
-- Follow-up steps planned on the days from %(first_day)s to %(last_day)s, each with its watch's
-- zone and close, its task's ledger action and the list's item waiting for it (if any).
SELECT s.watch_id, s.step_no, s.due_on, s.fired_at, s.task_ref, s.skip_reason,
       w.time_zone, w.closed_at, w.registered_at, a.outcome, a.reason AS action_reason, i.owner
FROM watch_steps s
JOIN watches w ON w.id = s.watch_id
LEFT JOIN actions a ON a.idempotency_key = 'task:' || s.watch_id || ':' || s.step_no
LEFT JOIN LATERAL (
    SELECT owner FROM work_items
    WHERE action_key = 'task:' || s.watch_id || ':' || s.step_no AND state <> 'closed'
    LIMIT 1
) i ON true
WHERE s.due_on BETWEEN %(first_day)s AND %(last_day)s;

-- name: account_actions
-- Ledger actions due in the window, but those whose own records the account reads (a step's
-- task, reminders, certificates, publications), each with the list's item for it or for its
-- event: a waiting one first, else one a person closed with a decision.
SELECT a.kind, a.idempotency_key AS name, a.due_at, a.due_at AS late_from, a.outcome, a.reason,
       CASE WHEN i.state <> 'closed' THEN i.owner END AS owner, i.closed_how
FROM actions a
LEFT JOIN LATERAL (
    SELECT owner, state, closed_how FROM work_items w
    WHERE (w.state <> 'closed' OR w.closed_how = 'decided')
      AND (w.action_key = a.idempotency_key
           OR (a.kind = 'crm_lead' AND w.event_id::text = split_part(a.idempotency_key, ':', 2)))
    ORDER BY (w.state <> 'closed') DESC, w.id DESC
    LIMIT 1
) i ON true
WHERE a.due_at >= %(since)s AND a.due_at <= %(until)s
  AND a.kind NOT IN ('task', 'reminder', 'certificate', 'publication');

-- name: account_events
-- Events received in the window, with the list's item for each (waiting, or closed by a person).
SELECT e.id, e.source, e.received_at, e.status, i.owner, i.state AS item_state,
       i.closed_how
FROM events e
LEFT JOIN LATERAL (
    SELECT owner, state, closed_how FROM work_items w
    WHERE w.event_id = e.id AND w.kind = 'dead_event'
    ORDER BY (w.state <> 'closed') DESC, w.id DESC
    LIMIT 1
) i ON true
WHERE e.received_at >= %(since)s AND e.received_at <= %(until)s;

-- name: account_reminders
-- Learning reminders due in the window, with the list's item waiting for each.
SELECT r.tenant_id, r.idempotency_key AS name, r.due_at, r.due_at AS late_from,
       r.delivery_outcome AS outcome,
       r.reason, i.owner, t.mode, t.time_zone, t.hours_start, t.hours_end, t.holiday_country,
       t.holiday_subdivision
FROM lms_reminders r
JOIN tenants t ON t.id = r.tenant_id
LEFT JOIN LATERAL (
    SELECT owner FROM work_items
    WHERE action_key = r.idempotency_key AND state <> 'closed'
    LIMIT 1
) i ON true
WHERE r.due_at >= %(since)s AND r.due_at <= %(until)s;

-- name: account_certificates
-- Certificates of completions in the window, with the list's item waiting for each.
SELECT c.tenant_id, c.idempotency_key AS name, c.completed_at AS due_at,
       c.completed_at AS late_from, c.state AS outcome,
       c.reason, i.owner, t.mode
FROM lms_certificates c
JOIN tenants t ON t.id = c.tenant_id
LEFT JOIN LATERAL (
    SELECT owner FROM work_items
    WHERE action_key = c.idempotency_key AND state <> 'closed'
    LIMIT 1
) i ON true
WHERE c.completed_at >= %(since)s AND c.completed_at <= %(until)s;

-- name: account_publications
-- Content due to be published in the window, with the list's item waiting for each (late from
-- its publish_at, or from when it was added if that came later).
SELECT p.tenant_id, p.idempotency_key AS name, p.publish_at AS due_at,
       -- (created_at is the database's clock: a machine on a set clock keeps publish_at)
       CASE WHEN p.created_at <= %(until)s THEN greatest(p.publish_at, p.created_at)
            ELSE p.publish_at END AS late_from,
       p.state AS outcome,
       p.reason, i.owner, t.mode
FROM lms_content p
JOIN tenants t ON t.id = p.tenant_id
LEFT JOIN LATERAL (
    SELECT owner FROM work_items
    WHERE action_key = p.idempotency_key AND state <> 'closed'
    LIMIT 1
) i ON true
WHERE p.publish_at >= %(since)s AND p.publish_at <= %(until)s;
