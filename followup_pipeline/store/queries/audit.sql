-- name: audit_record
-- One operator action, as it was done.
INSERT INTO audit_log (at, actor, action, subject, detail, reason)
VALUES (coalesce(%(at)s::timestamptz, now()), %(actor)s, %(action)s, %(subject)s, %(detail)s, %(reason)s)
RETURNING id;

-- name: audit_entries
-- The audit, newest first: of one subject (or every), of the last days (or all).
SELECT id, at, actor, action, subject, detail, reason FROM audit_log
WHERE (%(subject)s::text IS NULL OR subject = %(subject)s)
  AND (%(since)s::timestamptz IS NULL OR at >= %(since)s)
ORDER BY at DESC, id DESC
LIMIT %(limit)s;
