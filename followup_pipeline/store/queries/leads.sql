-- name: lead_upsert
-- One lead per person: a new e-mail address makes a lead, a known one is seen again (what the
-- new event says fills in what the lead did not know yet; the newest form's consent counts).
-- (id, whether it was new).
INSERT INTO leads AS l (email, name, company, phone, consent, consent_at, first_source,
                        first_seen_at, last_seen_at, crm_lead_id)
VALUES (%(email)s, %(name)s, %(company)s, %(phone)s, %(consent)s,
        CASE WHEN %(consent)s::boolean IS NOT NULL THEN %(at)s::timestamptz END, %(source)s,
        %(at)s, %(at)s, %(crm_lead_id)s)
ON CONFLICT (email) DO UPDATE
SET name = coalesce(l.name, EXCLUDED.name),
    company = coalesce(l.company, EXCLUDED.company),
    phone = coalesce(l.phone, EXCLUDED.phone),
    -- The newest form's consent wins, whatever order the events are handled in.
    consent = CASE WHEN EXCLUDED.consent_at IS NOT NULL
                        AND (l.consent_at IS NULL OR EXCLUDED.consent_at >= l.consent_at)
                   THEN EXCLUDED.consent ELSE l.consent END,
    consent_at = CASE WHEN EXCLUDED.consent_at IS NOT NULL
                           AND (l.consent_at IS NULL OR EXCLUDED.consent_at >= l.consent_at)
                      THEN EXCLUDED.consent_at ELSE l.consent_at END,
    first_source = CASE WHEN EXCLUDED.first_seen_at < l.first_seen_at
                        THEN EXCLUDED.first_source ELSE l.first_source END,
    first_seen_at = least(l.first_seen_at, EXCLUDED.first_seen_at),
    crm_lead_id = coalesce(l.crm_lead_id, EXCLUDED.crm_lead_id),
    last_seen_at = greatest(l.last_seen_at, EXCLUDED.last_seen_at)
RETURNING id, (xmax = 0) AS created;

-- name: lead_event_insert
-- Link a source event to its lead, once per event (a replay links nothing twice).
INSERT INTO lead_events (lead_id, event_id, source, kind, received_at, amount, currency,
                         amount_unit, page, message, crm_lead_id)
VALUES (%(lead_id)s, %(event_id)s, %(source)s, %(kind)s, %(at)s, %(amount)s, %(currency)s,
        %(amount_unit)s, %(page)s, %(message)s, %(crm_lead_id)s)
ON CONFLICT (event_id) DO NOTHING
RETURNING id;

-- name: leads_list
-- The leads, newest first, with how many source events brought each and from where, and the
-- intent and priority of the classification of the newest classified event (what the CRM's Lead
-- shows, as lead_crm.sql's lead_classification picks it; NULLs: none classified).
SELECT l.id, l.email, l.name, l.company, l.first_source, l.first_seen_at, l.last_seen_at,
       l.crm_lead_id, ev.events, ev.sources, c.intent, c.priority
FROM (
    SELECT * FROM leads ORDER BY last_seen_at DESC, id DESC LIMIT %(limit)s
) l
CROSS JOIN LATERAL (
    SELECT count(*)::int AS events,
           coalesce(string_agg(DISTINCT e.source, ',' ORDER BY e.source), '') AS sources
    FROM lead_events e WHERE e.lead_id = l.id
) ev
LEFT JOIN LATERAL (
    SELECT c.intent, c.priority
    FROM lead_classifications c JOIN lead_events e ON e.event_id = c.event_id
    WHERE c.lead_id = l.id
    ORDER BY e.received_at DESC, c.id DESC
    LIMIT 1
) c ON true
ORDER BY l.last_seen_at DESC, l.id DESC;

-- name: lead_detail
-- One lead, as `followup leads show` shows it.
SELECT id, email, name, company, phone, consent, consent_at, first_source, first_seen_at,
       last_seen_at, crm_lead_id, crm_written_at, company_domain
FROM leads WHERE id = %(lead_id)s;

-- name: lead_events_of
-- A lead's source events, oldest first.
SELECT e.event_id, e.source, e.kind, e.received_at, e.amount, e.currency, e.amount_unit, e.page,
       e.message, e.crm_lead_id
FROM lead_events e
WHERE e.lead_id = %(lead_id)s
ORDER BY e.received_at, e.id;

-- name: lead_written_by_us
-- Whether this version of a CRM Lead is our own write (the crm_upsert step records when the CRM
-- saved it): the sweep leaves it out, and reads a later edit by a person.
SELECT EXISTS (
    SELECT 1 FROM leads
    WHERE crm_lead_id = %(crm_lead_id)s AND crm_written_at = %(modified_at)s
) AS ours;
