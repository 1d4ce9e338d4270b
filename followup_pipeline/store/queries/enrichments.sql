-- name: latest_summary
-- The newest two-line summary of a deal, if any.
SELECT line1, line2, created_at FROM enrichments
WHERE subject_type = %(subject_type)s AND subject_id = %(subject_id)s
ORDER BY created_at DESC, id DESC
LIMIT 1;
