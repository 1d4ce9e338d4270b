-- name: lms_content_save
-- A version of a piece of content (`followup lms content add`): made, or changed while it waits
-- or after Moodle refused it (its approval is withdrawn by a change: what was approved is not
-- what is there now).
INSERT INTO lms_content (tenant_id, content_id, version, title, course_id, cmid, publish_at,
                         idempotency_key)
VALUES (%(tenant_id)s, %(content_id)s, %(version)s, %(title)s, %(course_id)s, %(cmid)s,
        %(publish_at)s, %(key)s)
ON CONFLICT (tenant_id, content_id, version) DO UPDATE
SET title = EXCLUDED.title, course_id = EXCLUDED.course_id, cmid = EXCLUDED.cmid,
    publish_at = EXCLUDED.publish_at, approved_by = NULL, approved_at = NULL,
    state = 'waiting', reason = NULL
WHERE lms_content.state IN ('waiting', 'failed')
RETURNING (xmax = 0) AS new;

-- name: lms_content_approve
-- An approval of one version, by a named person; only of a version that still waits.
UPDATE lms_content SET approved_by = %(by)s, approved_at = %(at)s
WHERE tenant_id = %(tenant_id)s AND content_id = %(content_id)s AND version = %(version)s
  AND state = 'waiting'
RETURNING version;

-- name: lms_content_rows
-- A tenant's content (every tenant's: NULL), each version with the current (highest) version of
-- its content id; with `due`, only what is due by then and not settled, and what was published
-- and not read back yet.
SELECT c.tenant_id, c.content_id, c.version, c.title, c.course_id, c.cmid, c.publish_at,
       c.approved_by, c.approved_at, c.state, c.reason, c.idempotency_key, c.published_at,
       c.created_at,
       (SELECT max(v.version) FROM lms_content v
        WHERE (v.tenant_id, v.content_id) = (c.tenant_id, c.content_id))::int AS current_version
FROM lms_content c
WHERE (%(tenant_id)s::text IS NULL OR c.tenant_id = %(tenant_id)s)
  AND (%(due)s::timestamptz IS NULL
       OR (c.publish_at <= %(due)s
           AND c.state IN ('waiting', 'attempted', 'failed', 'unknown', 'published')))
ORDER BY c.tenant_id, c.publish_at, c.content_id, c.version;

-- name: lms_content_lock
-- One version, locked for the re-check before its publication, with the current version of its
-- content id and whether it still stands as it was read.
SELECT c.tenant_id, c.content_id, c.version, c.title, c.course_id, c.cmid, c.publish_at,
       c.approved_by, c.approved_at, c.state, c.reason, c.idempotency_key, c.published_at,
       c.created_at,
       (SELECT max(v.version) FROM lms_content v
        WHERE (v.tenant_id, v.content_id) = (c.tenant_id, c.content_id))::int AS current_version
FROM lms_content c
WHERE c.tenant_id = %(tenant_id)s AND c.content_id = %(content_id)s AND c.version = %(version)s
FOR UPDATE;

-- name: lms_content_state
UPDATE lms_content
SET state = %(state)s, reason = %(reason)s,
    published_at = CASE WHEN %(state)s = 'published' THEN %(at)s ELSE published_at END
WHERE tenant_id = %(tenant_id)s AND content_id = %(content_id)s AND version = %(version)s;
