-- name: links_issue
-- A link for what it may do, made once per action: a mail sent again carries the same link; one
-- not used yet works for its whole time from the latest mail that carries it.
INSERT INTO links (id, purpose, subject, tenant_id, learner_id, content_id, version,
                   work_item_id, expires_at, created_at)
VALUES (%(id)s, %(purpose)s, %(subject)s, %(tenant_id)s, %(learner_id)s, %(content_id)s,
        %(version)s, %(work_item_id)s, %(expires_at)s, %(at)s)
ON CONFLICT (purpose, subject) DO UPDATE
SET expires_at = CASE WHEN links.uses = 0 THEN greatest(links.expires_at, EXCLUDED.expires_at)
                      ELSE links.expires_at END
RETURNING id, expires_at;

-- name: links_of_subject
-- The link made for an action, if any (how a Moodle message is found: by its link's id).
SELECT id FROM links WHERE purpose = %(purpose)s AND subject = %(subject)s;

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
-- The clicks stored and not applied yet, stored before `older_than` (the ingress applies each at
-- once; one whose apply did not end is applied by the next learning run).
SELECT id, body, received_at FROM events
WHERE source = 'link' AND status = 'pending' AND received_at < %(older_than)s
ORDER BY id
LIMIT 100;

-- name: links_event_take
-- A stored click, still pending, locked for its apply (None: done meanwhile, or being applied).
SELECT id FROM events WHERE id = %(id)s AND status = 'pending'
FOR UPDATE SKIP LOCKED;

-- name: lms_opt_in
-- The learner wants reminders again: every opt-out of theirs goes.
DELETE FROM lms_opt_outs WHERE tenant_id = %(tenant_id)s AND learner_id = %(learner_id)s
RETURNING action_type;
