-- name: lead_person_standing
-- What a person's classification stands on: the newest classification of an event of theirs
-- with a message of its own (NULLs: none), and the most urgent priority they had (NULL: none).
SELECT m.segment, m.intent, m.priority, m.summary, m.language,
       (SELECT min(priority) FROM lead_classifications WHERE lead_id = %(lead_id)s) AS most_urgent
FROM (SELECT 1) AS one
LEFT JOIN LATERAL (
    SELECT segment, intent, priority, summary, language FROM lead_classifications
    WHERE lead_id = %(lead_id)s AND from_message
    ORDER BY created_at DESC, id DESC LIMIT 1
) AS m ON true;

-- name: lead_earlier_events
-- A person's events before this one, newest first (the model is told of the newest few).
SELECT kind, received_at, page, message, amount, currency, amount_unit FROM lead_events
WHERE lead_id = %(lead_id)s AND event_id <> %(event_id)s AND received_at <= %(before)s
ORDER BY received_at DESC, id DESC
LIMIT %(limit)s;
