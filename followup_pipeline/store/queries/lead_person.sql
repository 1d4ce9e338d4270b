-- name: lead_person_standing
-- What a person's classification stands on: the classification of their newest event (by when
-- it came, not when it was classified) with a message of its own (NULLs: none), and the most
-- urgent priority they had (NULL: none).
SELECT m.segment, m.intent, m.priority, m.summary, m.language,
       (SELECT min(priority) FROM lead_classifications WHERE lead_id = %(lead_id)s) AS most_urgent
FROM (SELECT 1) AS one
LEFT JOIN LATERAL (
    SELECT c.segment, c.intent, c.priority, c.summary, c.language
    FROM lead_classifications c JOIN lead_events e ON e.event_id = c.event_id
    WHERE c.lead_id = %(lead_id)s AND c.from_message
    ORDER BY e.received_at DESC, c.id DESC LIMIT 1
) AS m ON true;

-- name: lead_earlier_events
-- A person's events before this one, newest first (the model is told of the newest few).
SELECT kind, received_at, page, message, amount, currency, amount_unit FROM lead_events
WHERE lead_id = %(lead_id)s AND event_id <> %(event_id)s AND received_at <= %(before)s
ORDER BY received_at DESC, id DESC
LIMIT %(limit)s;

-- name: lead_event_has_message
-- Whether a lead event brought a message of its own (a payment brings none).
SELECT message IS NOT NULL AS has_message FROM lead_events WHERE event_id = %(event_id)s;
