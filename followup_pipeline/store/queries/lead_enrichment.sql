-- name: company_cached
-- A company domain's lookup while it has not expired.
SELECT domain, found, company, looked_up_at, expires_at FROM company_lookups
WHERE domain = %(domain)s AND expires_at > %(now)s;

-- name: company_remember
-- Keep a lookup (found or a 404) until it expires.
INSERT INTO company_lookups (domain, found, company, looked_up_at, expires_at)
VALUES (%(domain)s, %(found)s, %(company)s, %(now)s, %(expires_at)s)
ON CONFLICT (domain) DO UPDATE
SET found = EXCLUDED.found, company = EXCLUDED.company, looked_up_at = EXCLUDED.looked_up_at,
    expires_at = EXCLUDED.expires_at;

-- name: lead_set_company
-- What the lookup said of a lead's company (kept apart from the company the person named).
UPDATE leads SET company_domain = %(domain)s, company_facts = %(facts)s
WHERE id = %(lead_id)s;

-- name: lead_company
SELECT id, company_domain, company_facts FROM leads WHERE id = %(lead_id)s;

-- name: lead_of_event
SELECT lead_id FROM lead_events WHERE event_id = %(event_id)s;

-- name: lead_classified
SELECT EXISTS (SELECT 1 FROM lead_classifications WHERE lead_id = %(lead_id)s) AS classified;

-- name: classification_insert
-- A lead event's checked classification, once.
INSERT INTO lead_classifications (event_id, lead_id, segment, intent, priority, summary, language,
                                  reasons, model, source, prompt_tokens, completion_tokens,
                                  created_at, from_message, answer)
VALUES (%(event_id)s, %(lead_id)s, %(segment)s, %(intent)s, %(priority)s, %(summary)s,
        %(language)s, %(reasons)s, %(model)s, %(source)s, %(prompt_tokens)s,
        %(completion_tokens)s, %(created_at)s, %(from_message)s, %(answer)s)
ON CONFLICT (event_id) DO NOTHING
RETURNING id;

-- name: lead_classifications_of
-- A lead's classifications, by when their events came (oldest first).
SELECT c.event_id, c.segment, c.intent, c.priority, c.summary, c.language, c.reasons, c.model,
       c.source, c.created_at, c.answer IS NOT NULL AS model_differed
FROM lead_classifications c JOIN lead_events e ON e.event_id = c.event_id
WHERE c.lead_id = %(lead_id)s
ORDER BY e.received_at, c.id;

-- name: model_spend_since
-- What the model cost since a moment, across its uses (deal summaries, their review items, lead
-- classifications): one spend limit for the model per hour.
SELECT count(*)::int AS calls, coalesce(sum(tokens), 0)::bigint AS tokens FROM (
    SELECT coalesce(prompt_tokens, 0) + coalesce(completion_tokens, 0) AS tokens
    FROM enrichments WHERE created_at > %(since)s AND source = 'model'
    UNION ALL
    SELECT coalesce(prompt_tokens, 0) + coalesce(completion_tokens, 0)
    FROM review_items WHERE created_at > %(since)s
    UNION ALL
    SELECT coalesce(prompt_tokens, 0) + coalesce(completion_tokens, 0)
    FROM lead_classifications WHERE created_at > %(since)s AND source = 'model'
) spent;

-- name: event_defer
-- Put a claimed event back until a moment without charging the attempt it was claimed with (the
-- model's budget was spent: nothing failed).
UPDATE events
SET attempts = greatest(attempts - 1, 0),
    next_attempt_at = clock_timestamp() + %(wait)s::interval, claimed_until = NULL,
    claimed_by = NULL
WHERE id = %(event_id)s;
