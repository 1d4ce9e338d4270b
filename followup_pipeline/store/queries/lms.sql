-- name: lms_tenants
-- Every tenant, in id order.
SELECT * FROM tenants ORDER BY id;

-- name: lms_tenant_upsert
-- A tenant as the academy configures it (`followup lms tenant set`, the demo): made or changed.
INSERT INTO tenants (id, name, moodle_url, token_ref, time_zone, holiday_country,
                     holiday_subdivision, channel, sender, course_ids, before_days,
                     after_business_days, remind_at, hours_start, hours_end, mode, owner, backup,
                     credential_token_ref, credential_groups, language)
VALUES (%(id)s, %(name)s, %(moodle_url)s, %(token_ref)s, %(time_zone)s, %(holiday_country)s,
        %(holiday_subdivision)s, %(channel)s, %(sender)s, %(course_ids)s, %(before_days)s,
        %(after_business_days)s, %(remind_at)s, %(hours_start)s, %(hours_end)s, %(mode)s,
        %(owner)s, %(backup)s, %(credential_token_ref)s, %(credential_groups)s, %(language)s)
ON CONFLICT (id) DO UPDATE
SET name = EXCLUDED.name, moodle_url = EXCLUDED.moodle_url, token_ref = EXCLUDED.token_ref,
    time_zone = EXCLUDED.time_zone, holiday_country = EXCLUDED.holiday_country,
    holiday_subdivision = EXCLUDED.holiday_subdivision, channel = EXCLUDED.channel,
    sender = EXCLUDED.sender, course_ids = EXCLUDED.course_ids,
    before_days = EXCLUDED.before_days, after_business_days = EXCLUDED.after_business_days,
    remind_at = EXCLUDED.remind_at, hours_start = EXCLUDED.hours_start,
    hours_end = EXCLUDED.hours_end, mode = EXCLUDED.mode, owner = EXCLUDED.owner,
    backup = EXCLUDED.backup, credential_token_ref = EXCLUDED.credential_token_ref,
    credential_groups = EXCLUDED.credential_groups, language = EXCLUDED.language;

-- name: lms_tenant_synced
UPDATE tenants SET synced_at = %(at)s WHERE id = %(id)s;

-- name: lms_tenant_reached
-- A run reached the tenant's Moodle: whatever kept it away is over.
UPDATE tenants SET reached_at = %(at)s, unreachable_since = NULL, unreachable_error = NULL
WHERE id = %(id)s AND %(error)s::text IS NULL;

-- name: lms_tenant_unreachable
-- A run could not reach the tenant's Moodle: since the first such run, with the latest error.
UPDATE tenants
SET unreachable_since = coalesce(unreachable_since, %(at)s), unreachable_error = %(error)s
WHERE id = %(id)s;

-- name: lms_assignment_completed
UPDATE lms_assignments SET completed_at = coalesce(completed_at, %(at)s)
WHERE tenant_id = %(tenant_id)s AND learner_id = %(learner_id)s AND quiz_id = %(quiz_id)s;

-- name: lms_assignment_succeeded
-- The latest reminder of an assignment that reached the learner's provider.
UPDATE lms_assignments
SET last_successful_action_at = greatest(last_successful_action_at, %(at)s)
WHERE tenant_id = %(tenant_id)s AND learner_id = %(learner_id)s AND quiz_id = %(quiz_id)s;

-- name: lms_reminders_due
-- A tenant's reminders due by now and not settled, with what the send needs, oldest first; and
-- those accepted lately but not read back yet (asked again).
SELECT r.id, r.tenant_id, r.learner_id, r.assignment_id, r.action_type, r.due_at, r.time_zone,
       r.local_day, r.idempotency_key, r.delivery_outcome, a.course_id, a.coursemodule,
       a.learner_name, a.learner_email, a.quiz_name, a.due_at AS quiz_due_at, a.completed_at,
       l.lang AS learner_lang, l.time_zone AS learner_zone
FROM lms_reminders r
JOIN lms_assignments a ON (a.tenant_id, a.learner_id, a.quiz_id)
                        = (r.tenant_id, r.learner_id, r.assignment_id)
LEFT JOIN lms_learners l ON (l.tenant_id, l.learner_id) = (r.tenant_id, r.learner_id)
WHERE r.tenant_id = %(tenant_id)s AND r.due_at <= %(now)s
  AND (r.delivery_outcome IN ('planned', 'attempted', 'failed', 'unknown')
       OR (r.delivery_outcome = 'accepted' AND r.settled_at >= %(confirm_since)s))
ORDER BY r.due_at, r.id;

-- name: lms_reminder_settle
UPDATE lms_reminders
SET delivery_outcome = %(outcome)s, reason = %(reason)s,
    settled_at = CASE WHEN %(outcome)s IN ('planned', 'attempted', 'failed', 'unknown')
                      THEN settled_at ELSE %(at)s END
WHERE id = %(id)s;

-- name: lms_opted_out
SELECT EXISTS (
    SELECT 1 FROM lms_opt_outs
    WHERE tenant_id = %(tenant_id)s AND learner_id = %(learner_id)s
      AND action_type IN ('all', %(action_type)s)
) AS opted_out;

-- name: lms_opt_out
INSERT INTO lms_opt_outs (tenant_id, learner_id, action_type) VALUES
    (%(tenant_id)s, %(learner_id)s, %(action_type)s)
ON CONFLICT DO NOTHING;

-- name: lms_status
-- Per tenant: now, reminders overdue (due and not settled), delivery failures (failed or
-- unclear) and planned ahead; since a moment, the duplicates suppressed (overtaken), opted out,
-- completed first, expired (past the catch-up window unsent), dry, sent and confirmed; the
-- catch-up queue's open items.
SELECT t.id AS tenant_id, t.mode, t.time_zone, t.reached_at, t.unreachable_since,
       t.unreachable_error,
       count(r.id) FILTER (WHERE r.delivery_outcome IN ('planned', 'attempted', 'failed', 'unknown')
                           AND r.due_at <= %(now)s)::int AS overdue,
       count(r.id) FILTER (WHERE r.delivery_outcome IN ('failed', 'unknown'))::int AS failures,
       count(r.id) FILTER (WHERE r.reason = 'superseded' AND r.settled_at >= %(since)s)::int
           AS superseded,
       count(r.id) FILTER (WHERE r.reason = 'opted_out' AND r.settled_at >= %(since)s)::int
           AS opted_out,
       count(r.id) FILTER (WHERE r.reason = 'completed' AND r.settled_at >= %(since)s)::int
           AS completed,
       count(r.id) FILTER (WHERE r.reason = 'expired' AND r.settled_at >= %(since)s)::int
           AS expired,
       count(r.id) FILTER (WHERE r.reason = 'dry_run' AND r.settled_at >= %(since)s)::int
           AS dry_run,
       count(r.id) FILTER (WHERE r.delivery_outcome IN ('accepted', 'confirmed')
                           AND r.settled_at >= %(since)s)::int AS sent,
       count(r.id) FILTER (WHERE r.delivery_outcome = 'confirmed'
                           AND r.settled_at >= %(since)s)::int AS confirmed,
       count(r.id) FILTER (WHERE r.delivery_outcome = 'planned' AND r.due_at > %(now)s)::int
           AS planned,
       (SELECT count(*) FROM work_items q
        WHERE q.tenant_id = t.id AND q.state <> 'closed')::int AS queued
FROM tenants t LEFT JOIN lms_reminders r ON r.tenant_id = t.id
GROUP BY t.id ORDER BY t.id;

-- name: lms_reminders_late
-- A tenant's reminders due by %(late_before)s and neither sent nor settled (its Moodle or mailbox
-- away), oldest first, with whom and what each is for: they go on the owner's list.
SELECT r.idempotency_key AS key, r.action_type, r.due_at, r.learner_id, a.learner_name,
       a.quiz_name
FROM lms_reminders r
LEFT JOIN lms_assignments a
    ON a.tenant_id = r.tenant_id AND a.learner_id = r.learner_id AND a.quiz_id = r.assignment_id
WHERE r.tenant_id = %(tenant_id)s
  AND r.delivery_outcome IN ('planned', 'failed', 'unknown')
  AND r.due_at <= %(late_before)s
ORDER BY r.due_at, r.id;

-- name: lms_reminder_decided
-- A person decided a reminder waiting on the list is done with: it is not sent.
UPDATE lms_reminders
SET delivery_outcome = 'suppressed', reason = 'decided', settled_at = %(at)s
WHERE idempotency_key = %(key)s AND delivery_outcome IN ('planned', 'failed', 'unknown')
RETURNING id;

-- name: lms_learner_save
-- A learner's language and zone as their Moodle profile gives them (the daily whole sync).
INSERT INTO lms_learners (tenant_id, learner_id, lang, time_zone, seen_at)
VALUES (%(tenant_id)s, %(learner_id)s, %(lang)s, %(time_zone)s, %(at)s)
ON CONFLICT (tenant_id, learner_id) DO UPDATE
SET lang = EXCLUDED.lang, time_zone = EXCLUDED.time_zone, seen_at = EXCLUDED.seen_at
WHERE (lms_learners.lang, lms_learners.time_zone)
      IS DISTINCT FROM (EXCLUDED.lang, EXCLUDED.time_zone);

-- name: lms_reminder_of_key
-- A reminder by its key, with whom and what it is for (an owner's mail names them).
SELECT r.idempotency_key AS key, r.learner_id, r.action_type, r.due_at, a.learner_name,
       a.quiz_name
FROM lms_reminders r
LEFT JOIN lms_assignments a ON (a.tenant_id, a.learner_id, a.quiz_id)
                             = (r.tenant_id, r.learner_id, r.assignment_id)
WHERE r.idempotency_key = %(key)s;

-- name: lms_assignments_save
-- What one sync read of a tenant's assignments, in one statement: a row that changed is updated
-- (its due date may move; a completion is kept), one that did not is left as it is.
INSERT INTO lms_assignments AS a (tenant_id, learner_id, quiz_id, course_id, coursemodule,
                                  learner_name, learner_email, quiz_name, due_at, completed_at,
                                  synced_at)
SELECT %(tenant_id)s, r.learner_id, r.quiz_id, r.course_id, r.coursemodule, r.learner_name,
       r.learner_email, r.quiz_name, r.due_at, r.completed_at, %(at)s
FROM json_to_recordset(%(rows)s::json) AS r(
    learner_id bigint, quiz_id bigint, course_id bigint, coursemodule bigint, learner_name text,
    learner_email text, quiz_name text, due_at timestamptz, completed_at timestamptz
)
ON CONFLICT (tenant_id, learner_id, quiz_id) DO UPDATE
SET course_id = EXCLUDED.course_id, coursemodule = EXCLUDED.coursemodule,
    learner_name = EXCLUDED.learner_name, learner_email = EXCLUDED.learner_email,
    quiz_name = EXCLUDED.quiz_name, due_at = EXCLUDED.due_at,
    completed_at = coalesce(a.completed_at, EXCLUDED.completed_at),
    synced_at = EXCLUDED.synced_at
WHERE (a.course_id, a.coursemodule, a.learner_name, a.learner_email, a.quiz_name, a.due_at)
      IS DISTINCT FROM (EXCLUDED.course_id, EXCLUDED.coursemodule, EXCLUDED.learner_name,
                        EXCLUDED.learner_email, EXCLUDED.quiz_name, EXCLUDED.due_at)
   OR (a.completed_at IS NULL AND EXCLUDED.completed_at IS NOT NULL);

-- name: lms_assignments_completed
-- A tenant's assignments known completed (by any sync or send): no run plans them again.
SELECT learner_id, quiz_id FROM lms_assignments
WHERE tenant_id = %(tenant_id)s AND completed_at IS NOT NULL;

-- name: lms_reminders_plan_all
-- A sync's planned reminders of a tenant, in one statement, once per key: a plan made again
-- after the tenant's time or zone changed moves what is still planned; one retired as unassigned
-- comes back when the learner does; one planned as it was is left as it is (not rewritten).
INSERT INTO lms_reminders AS r (tenant_id, learner_id, assignment_id, action_type, due_at,
                                time_zone, local_day, idempotency_key)
SELECT %(tenant_id)s, p.learner_id, p.quiz_id, p.action_type, p.due_at, p.time_zone, p.local_day,
       p.key
FROM json_to_recordset(%(rows)s::json) AS p(
    learner_id bigint, quiz_id bigint, action_type text, due_at timestamptz, time_zone text,
    local_day date, key text
)
ON CONFLICT (idempotency_key) DO UPDATE
SET due_at = EXCLUDED.due_at, time_zone = EXCLUDED.time_zone, delivery_outcome = 'planned',
    reason = NULL, settled_at = NULL
WHERE (r.delivery_outcome = 'planned'
       AND (r.due_at, r.time_zone) IS DISTINCT FROM (EXCLUDED.due_at, EXCLUDED.time_zone))
   OR (r.delivery_outcome = 'suppressed' AND r.reason = 'unassigned')
RETURNING (xmax = 0) AS new;

-- name: lms_reminders_replanned_all
-- The planned reminders of a sync's assignments that their plans no longer hold (a due date
-- moved): suppressed, with the reason, in one statement. Each assignment comes with its plan's
-- keys.
UPDATE lms_reminders AS r
SET delivery_outcome = 'suppressed', reason = %(reason)s, settled_at = %(at)s
FROM json_to_recordset(%(plans)s::json) AS k(learner_id bigint, quiz_id bigint, keys text[])
WHERE r.tenant_id = %(tenant_id)s AND r.learner_id = k.learner_id
  AND r.assignment_id = k.quiz_id AND r.delivery_outcome = 'planned'
  AND NOT (r.idempotency_key = ANY(k.keys))
RETURNING r.id;

-- name: lms_reminders_unseen
-- Planned reminders of a tenant's assignments the sync did not see (a learner unenrolled or
-- suspended, a quiz deleted or without a due date any more): retired, reason `unassigned`.
UPDATE lms_reminders AS r
SET delivery_outcome = 'suppressed', reason = 'unassigned', settled_at = %(at)s
WHERE r.tenant_id = %(tenant_id)s AND r.delivery_outcome = 'planned'
  AND NOT EXISTS (
      SELECT 1 FROM json_to_recordset(%(seen)s::json) AS s(learner_id bigint, quiz_id bigint)
      WHERE s.learner_id = r.learner_id AND s.quiz_id = r.assignment_id
  )
RETURNING r.id;
