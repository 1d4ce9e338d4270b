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
-- The leads, newest first, with how many source events brought each and from where.
SELECT l.id, l.email, l.name, l.company, l.first_source, l.first_seen_at, l.last_seen_at,
       l.crm_lead_id, count(e.id)::int AS events,
       coalesce(string_agg(DISTINCT e.source, ',' ORDER BY e.source), '') AS sources
FROM leads l LEFT JOIN lead_events e ON e.lead_id = l.id
GROUP BY l.id
ORDER BY l.last_seen_at DESC, l.id DESC
LIMIT %(limit)s;

-- name: lead_written_by_us
-- Whether this version of a CRM Lead is our own write (the crm_upsert step records when the CRM
-- saved it): the sweep leaves it out, and reads a later edit by a person.
SELECT EXISTS (
    SELECT 1 FROM leads
    WHERE crm_lead_id = %(crm_lead_id)s AND crm_written_at = %(modified_at)s
) AS ours;
