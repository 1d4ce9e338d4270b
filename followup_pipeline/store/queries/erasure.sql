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
-- Processed webhook bodies that hold the text (a deal's id, an address, as written or in lower
-- case): emptied, the rows kept. A pending event is left (still to be processed), and so is a
-- dead letter (an operator may replay it): both are counted, to be erased once settled.
UPDATE events SET body = ''::bytea, headers = '{}'::jsonb
WHERE status IN ('done', 'unhandled') AND octet_length(body) > 0
  AND (position(convert_to(%(text)s, 'UTF8') IN body) > 0
       OR position(convert_to(lower(%(text)s), 'UTF8') IN body) > 0)
RETURNING id;

-- name: erase_waiting_events_naming
SELECT count(*)::int AS n FROM events
WHERE status IN ('pending', 'dead')
  AND (position(convert_to(%(text)s, 'UTF8') IN body) > 0
       OR position(convert_to(lower(%(text)s), 'UTF8') IN body) > 0);

-- name: erase_text_in_alerts
-- An alert's subject and message, the text replaced (in any case).
UPDATE alerts SET subject = regexp_replace(subject, %(pattern)s, '[erased]', 'gi'),
                  message = regexp_replace(message, %(pattern)s, '[erased]', 'gi')
WHERE strpos(lower(subject), lower(%(text)s)) > 0 OR strpos(lower(message), lower(%(text)s)) > 0
RETURNING id;

-- name: erase_text_in_errors
-- The errors a vendor's answer put on the ledger (an address echoed back), the text replaced.
WITH actions_done AS (
    UPDATE actions SET last_error = regexp_replace(last_error, %(pattern)s, '[erased]', 'gi')
    WHERE strpos(lower(last_error), lower(%(text)s)) > 0
    RETURNING id
), attempts_done AS (
    UPDATE action_attempts SET error = regexp_replace(error, %(pattern)s, '[erased]', 'gi')
    WHERE strpos(lower(error), lower(%(text)s)) > 0
    RETURNING action_id
)
SELECT id FROM actions_done UNION ALL SELECT action_id FROM attempts_done;

-- name: erase_text_in_review_items
UPDATE review_items SET source_text = NULL, raw_output = '', deal_name = NULL
WHERE strpos(lower(coalesce(source_text, '')), lower(%(text)s)) > 0
   OR strpos(lower(raw_output), lower(%(text)s)) > 0
   OR strpos(lower(coalesce(deal_name, '')), lower(%(text)s)) > 0
RETURNING id;

-- name: erase_lead_review_items
-- A lead's review items (one per lead event): its text, the model's answer and the company.
UPDATE review_items SET source_text = NULL, raw_output = '', deal_name = NULL
WHERE subject_type = 'LeadEvent' AND subject_id = ANY(%(events)s::text[])
RETURNING id;

-- name: erase_text_in_queue
-- What the list of work waiting for a person says of an item (a learner's name).
UPDATE work_items SET what = regexp_replace(what, %(pattern)s, '[erased]', 'gi'),
                      reason = regexp_replace(reason, %(pattern)s, '[erased]', 'gi'),
                      error = regexp_replace(error, %(pattern)s, '[erased]', 'gi'),
                      closed_note = regexp_replace(closed_note, %(pattern)s, '[erased]', 'gi')
WHERE strpos(lower(what), lower(%(text)s)) > 0 OR strpos(lower(reason), lower(%(text)s)) > 0
   OR strpos(lower(coalesce(error, '')), lower(%(text)s)) > 0
   OR strpos(lower(coalesce(closed_note, '')), lower(%(text)s)) > 0
RETURNING id;

-- name: erase_open_watch
SELECT id FROM watches WHERE subject_id = %(deal)s AND closed_at IS NULL;

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
-- A learner's name and address on their assignments; the names as they were (to find them in
-- free text).
WITH old AS (
    SELECT tenant_id, learner_id, quiz_id, learner_name FROM lms_assignments
    WHERE lower(learner_email) = lower(%(email)s)
    FOR UPDATE
)
UPDATE lms_assignments a SET learner_name = NULL, learner_email = NULL
FROM old
WHERE (a.tenant_id, a.learner_id, a.quiz_id) = (old.tenant_id, old.learner_id, old.quiz_id)
RETURNING a.tenant_id, a.learner_id, old.learner_name;

-- name: erase_person_certificates
UPDATE lms_certificates SET learner_name = NULL, learner_email = NULL
WHERE lower(learner_email) = lower(%(email)s)
RETURNING credential_id;
