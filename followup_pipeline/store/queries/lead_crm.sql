-- name: lead_for_crm
-- What the CRM write needs of a lead: the person, where they first came from, the CRM's Lead,
-- and the newest payment's amount in its currency's major unit (one kept in minor units, its
-- currency unknown, is never written to the CRM).
SELECT l.id, l.email, l.name, l.company, l.phone, l.first_source, l.crm_lead_id,
       l.crm_written_at, l.crm_fields, paid.amount AS paid_amount, paid.currency AS paid_currency
FROM leads l
LEFT JOIN LATERAL (
    SELECT e.amount, e.currency FROM lead_events e
    WHERE e.lead_id = l.id AND e.kind = 'payment' AND e.amount_unit = 'major'
    ORDER BY e.received_at DESC, e.id DESC
    LIMIT 1
) paid ON true
WHERE l.id = %(lead_id)s;

-- name: lead_latest_classification
-- The classification of a lead's newest classified event (by when it came, not when it was
-- classified: a retry or a review decided late does not win over a newer event): what the CRM's
-- Lead shows.
SELECT c.segment, c.intent, c.priority, c.summary, c.language
FROM lead_classifications c JOIN lead_events e ON e.event_id = c.event_id
WHERE c.lead_id = %(lead_id)s
ORDER BY e.received_at DESC, c.id DESC
LIMIT 1;

-- name: lead_set_crm
-- The CRM's Lead of a lead, when the CRM saved our write of it (its `modifiedAt`), and the
-- classification's attributes it holds as ours.
UPDATE leads SET crm_lead_id = %(crm_lead_id)s,
                 crm_written_at = coalesce(%(written_at)s, crm_written_at),
                 crm_fields = %(fields)s
WHERE id = %(lead_id)s;

-- name: lead_crm_lock
-- One writer of a person's CRM Lead at a time, across runs: a session lock, held without a
-- transaction while the CRM is asked, released at once after (or with the connection).
SELECT pg_try_advisory_lock(hashtextextended('followup.lead_crm.' || %(lead_id)s::text, 0)) AS held;

-- name: lead_crm_unlock
SELECT pg_advisory_unlock(hashtextextended('followup.lead_crm.' || %(lead_id)s::text, 0))
    AS released;

-- name: lead_crm_other_in_flight
-- Another event's CRM write of the same person whose answer was lost within the in-flight
-- window: its create may still be landing, so a search now could miss it.
SELECT EXISTS (
    SELECT 1 FROM actions a
    JOIN lead_events e ON a.idempotency_key = 'lead:' || e.event_id || ':crm_upsert'
    WHERE e.lead_id = %(lead_id)s AND e.event_id <> %(event_id)s AND a.kind = 'crm_lead'
      AND a.outcome IN ('attempted', 'unknown')
      AND clock_timestamp() - a.updated_at < make_interval(secs => %(window_s)s)
) AS busy;

-- name: lead_event_reopen
-- A done lead event back to pending, due now, with fresh attempts: its steps that finished are
-- skipped, the next one runs (a review decision lets the event go on to the CRM).
UPDATE events
SET status = 'pending', attempts = 0, next_attempt_at = clock_timestamp(), claimed_until = NULL,
    claimed_by = NULL, processed_at = NULL
WHERE id = %(event_id)s AND status = 'done'
RETURNING id;

-- name: lead_crm_actions_since
-- The CRM writes of lead events since a moment (live and shadow), with their leads, newest first.
SELECT a.idempotency_key, a.outcome, a.reason, a.provider_ref, a.payload, a.created_at,
       l.id AS lead_id, l.email
FROM actions a
JOIN lead_events e ON a.idempotency_key = 'lead:' || e.event_id || ':crm_upsert'
JOIN leads l ON l.id = e.lead_id
WHERE a.kind = 'crm_lead' AND a.created_at >= %(since)s
ORDER BY a.created_at DESC, a.id DESC
LIMIT %(limit)s;
