-- name: erase_deal_names
-- The names we keep of a deal (its name and its account's), to find them in free text.
SELECT DISTINCT name FROM (
    SELECT subject_name AS name FROM watches WHERE subject_id = %(deal)s
    UNION SELECT account_name FROM watches WHERE subject_id = %(deal)s
    UNION SELECT deal_name FROM review_items WHERE subject_id = %(deal)s
) names WHERE name IS NOT NULL AND length(name) >= 3 AND name <> '[erased]';

-- name: erase_deal_watches
-- A deal's watches keep their keys, dates, stage and counts; its name, account and link go.
UPDATE watches SET subject_name = '[erased]', account_name = NULL, crm_url = NULL,
                   last_error = NULL
WHERE subject_id = %(deal)s
RETURNING id;

-- name: erase_deal_summaries
UPDATE enrichments SET line1 = '[erased]', line2 = '[erased]'
WHERE subject_id = %(deal)s
RETURNING id;

-- name: erase_deal_review_items
-- The e-mail text sent to the model, its answer and the deal's name.
UPDATE review_items SET deal_name = NULL, source_text = NULL, raw_output = ''
WHERE subject_id = %(deal)s
RETURNING id;

-- name: erase_event_bodies_naming
-- Webhook bodies that name the text (an id, an address): emptied, the rows kept. A pending
-- event is left (it is still to be processed: erase again once it is done).
UPDATE events SET body = ''::bytea, headers = '{}'::jsonb
WHERE status <> 'pending' AND octet_length(body) > 0
  AND position(convert_to(%(text)s, 'UTF8') IN body) > 0
RETURNING id;

-- name: erase_pending_events_naming
SELECT count(*)::int AS n FROM events
WHERE status = 'pending' AND position(convert_to(%(text)s, 'UTF8') IN body) > 0;

-- name: erase_text_in_alerts
-- An alert's subject and message, the text replaced.
UPDATE alerts SET subject = replace(subject, %(text)s, '[erased]'),
                  message = replace(message, %(text)s, '[erased]')
WHERE strpos(subject, %(text)s) > 0 OR strpos(message, %(text)s) > 0
RETURNING id;

-- name: erase_text_in_review_items
UPDATE review_items SET source_text = NULL, raw_output = '', deal_name = NULL
WHERE strpos(coalesce(source_text, ''), %(text)s) > 0 OR strpos(raw_output, %(text)s) > 0
   OR strpos(coalesce(deal_name, ''), %(text)s) > 0
RETURNING id;

-- name: erase_deal_vendor_objects
-- What lives with a vendor and cannot be erased from here: the deal's ClickUp tasks.
SELECT DISTINCT a.provider_ref AS ref
FROM actions a JOIN watches w ON w.id = a.watch_id
WHERE w.subject_id = %(deal)s AND a.kind = 'task' AND a.provider_ref IS NOT NULL
ORDER BY 1;

-- name: erase_deal_mails
-- Mails sent while the deal was followed up (its morning lists and overviews may name it).
SELECT a.idempotency_key AS ref
FROM actions a
WHERE a.kind = 'report' AND a.outcome IN ('accepted', 'confirmed')
  AND a.created_at >= (SELECT min(registered_at) FROM watches WHERE subject_id = %(deal)s)
ORDER BY a.created_at;

-- name: erase_person_leads
-- A person's lead: the address becomes a placeholder of its id (the key stays unique), the name,
-- company, phone and what the lookup found go; dates, sources, counts and the CRM's id stay.
UPDATE leads SET email = 'erased-' || id || '@erased.invalid', name = NULL, company = NULL,
                 phone = NULL, company_facts = NULL, crm_fields = '{}'::jsonb
WHERE lower(email) = lower(%(email)s)
RETURNING id, crm_lead_id;

-- name: erase_person_lead_events
UPDATE lead_events SET message = NULL, page = NULL
WHERE lead_id = ANY(%(leads)s::bigint[])
RETURNING event_id;

-- name: erase_person_classifications
UPDATE lead_classifications SET summary = '[erased]', reasons = '{}'
WHERE lead_id = ANY(%(leads)s::bigint[])
RETURNING id;

-- name: erase_events_by_id
UPDATE events SET body = ''::bytea, headers = '{}'::jsonb
WHERE id = ANY(%(ids)s::bigint[]) AND status <> 'pending'
RETURNING id;

-- name: erase_person_crm_writes
-- The CRM writes of the person's lead events (a shadow write keeps what it would have written).
UPDATE actions SET payload = '{}'::jsonb
WHERE kind = 'crm_lead' AND idempotency_key = ANY(%(keys)s::text[])
RETURNING id;

-- name: erase_person_learners
UPDATE lms_assignments SET learner_name = NULL, learner_email = NULL
WHERE lower(learner_email) = lower(%(email)s)
RETURNING tenant_id, learner_id;

-- name: erase_person_certificates
UPDATE lms_certificates SET learner_name = NULL, learner_email = NULL
WHERE lower(learner_email) = lower(%(email)s)
RETURNING credential_id;
