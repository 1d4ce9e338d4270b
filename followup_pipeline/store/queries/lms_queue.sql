-- name: lms_queue_park
-- An open action that can be neither done nor suppressed, with its owner: queued once per key
-- (queued again, its reason and owner are brought up to date).
INSERT INTO lms_queue (tenant_id, action_key, kind, what, reason, owner, backup, queued_at,
                       updated_at)
VALUES (%(tenant_id)s, %(action_key)s, %(kind)s, %(what)s, %(reason)s, %(owner)s, %(backup)s,
        %(at)s, %(at)s)
ON CONFLICT (action_key) WHERE closed_at IS NULL DO UPDATE
SET what = EXCLUDED.what, reason = EXCLUDED.reason, owner = EXCLUDED.owner,
    backup = EXCLUDED.backup, updated_at = EXCLUDED.updated_at
RETURNING id, (xmax = 0) AS new;

-- name: lms_queue_close
-- The queued action was done or settled: closed, with how.
UPDATE lms_queue SET closed_at = %(at)s, closed_how = %(how)s
WHERE action_key = %(action_key)s AND closed_at IS NULL
RETURNING id;

-- name: lms_queue_list
-- The queue, open items first and oldest first; closed ones since a moment when asked for.
SELECT id, tenant_id, action_key, kind, what, reason, owner, backup, queued_at, updated_at,
       closed_at, closed_how
FROM lms_queue
WHERE (%(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s)
  AND (closed_at IS NULL OR closed_at >= %(closed_since)s)
ORDER BY closed_at IS NOT NULL, queued_at, id;

-- name: lms_queue_open_keys
-- The open items' keys of a tenant, by kind.
SELECT action_key FROM lms_queue
WHERE tenant_id = %(tenant_id)s AND kind = %(kind)s AND closed_at IS NULL;

-- name: lms_queue_all_open_keys
-- The keys of every open item (their dead letters are alerted as catch-up items).
SELECT action_key FROM lms_queue WHERE closed_at IS NULL;
