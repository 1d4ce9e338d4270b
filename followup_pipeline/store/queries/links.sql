-- name: links_issue
-- A link for what it may do, made once: a mail sent again carries the same link, with the
-- expiry of the first.
INSERT INTO links (id, purpose, tenant_id, learner_id, content_id, version, work_item_id,
                   expires_at, created_at)
VALUES (%(id)s, %(purpose)s, %(tenant_id)s, %(learner_id)s, %(content_id)s, %(version)s,
        %(work_item_id)s, %(expires_at)s, %(at)s)
ON CONFLICT (id) DO UPDATE SET id = links.id
RETURNING *;

-- name: links_find
-- A link by its id (None: no such link).
SELECT l.*, t.name AS tenant_name, t.language, p.lang AS learner_lang, c.title
FROM links l
JOIN tenants t ON t.id = l.tenant_id
LEFT JOIN lms_learners p ON (p.tenant_id, p.learner_id) = (l.tenant_id, l.learner_id)
LEFT JOIN lms_content c ON (c.tenant_id, c.content_id, c.version)
                         = (l.tenant_id, l.content_id, l.version)
WHERE l.id = %(id)s;

-- name: links_lock
-- A link by its id, locked until the transaction ends (its use).
SELECT l.*, t.name AS tenant_name, t.language, p.lang AS learner_lang, c.title
FROM links l
JOIN tenants t ON t.id = l.tenant_id
LEFT JOIN lms_learners p ON (p.tenant_id, p.learner_id) = (l.tenant_id, l.learner_id)
LEFT JOIN lms_content c ON (c.tenant_id, c.content_id, c.version)
                         = (l.tenant_id, l.content_id, l.version)
WHERE l.id = %(id)s
FOR UPDATE OF l;

-- name: links_used
UPDATE links SET uses = uses + 1, used_at = coalesce(used_at, %(at)s) WHERE id = %(id)s;

-- name: links_pending
-- The clicks stored and not applied yet (the ingress applies each at once; one whose apply
-- did not end is applied by the next learning run).
SELECT id, body FROM events
WHERE source = 'link' AND status = 'pending'
ORDER BY id
LIMIT 100;

-- name: lms_opt_in
-- The learner wants reminders again: every opt-out of theirs goes.
DELETE FROM lms_opt_outs WHERE tenant_id = %(tenant_id)s AND learner_id = %(learner_id)s
RETURNING action_type;
