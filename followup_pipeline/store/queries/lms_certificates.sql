-- name: lms_certificate_seen
-- A learner seen complete in a course: recorded once (its export to be issued), their name,
-- address and the course's group brought up to date.
INSERT INTO lms_certificates (tenant_id, learner_id, course_id, group_id, learner_name,
                              learner_email, completed_at, idempotency_key, seen_at)
VALUES (%(tenant_id)s, %(learner_id)s, %(course_id)s, %(group_id)s, %(learner_name)s,
        %(learner_email)s, %(completed_at)s, %(key)s, %(at)s)
ON CONFLICT (tenant_id, learner_id, course_id) DO UPDATE
SET group_id = EXCLUDED.group_id, learner_name = EXCLUDED.learner_name,
    learner_email = EXCLUDED.learner_email, seen_at = EXCLUDED.seen_at
RETURNING (xmax = 0) AS new;

-- name: lms_certificate_rows
-- A tenant's certificates (every tenant's: NULL), oldest completion first.
SELECT tenant_id, learner_id, course_id, group_id, learner_name, learner_email, completed_at,
       generation, idempotency_key, state, reason, credential_id, confirmed_at, lost_at, seen_at
FROM lms_certificates
WHERE (%(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s)
ORDER BY completed_at, learner_id, course_id;

-- name: lms_certificate_state
UPDATE lms_certificates
SET state = %(state)s, reason = %(reason)s,
    credential_id = coalesce(%(credential_id)s, credential_id),
    confirmed_at = CASE WHEN %(state)s = 'confirmed' THEN %(at)s ELSE confirmed_at END
WHERE tenant_id = %(tenant_id)s AND learner_id = %(learner_id)s AND course_id = %(course_id)s
  AND idempotency_key = %(key)s;

-- name: lms_certificate_reissue
-- The export is issued again under the next generation's key: the platform lost the one it had
-- (`lost`), or the one before was only recorded in a dry run.
UPDATE lms_certificates
SET generation = generation + 1, idempotency_key = %(new_key)s, state = 'missing', reason = NULL,
    credential_id = NULL, confirmed_at = NULL,
    lost_at = CASE WHEN %(lost)s THEN %(at)s ELSE lost_at END
WHERE tenant_id = %(tenant_id)s AND learner_id = %(learner_id)s AND course_id = %(course_id)s
  AND idempotency_key = %(key)s
RETURNING generation;

-- name: lms_tenant_certificates_checked
UPDATE tenants SET certificates_checked_at = %(at)s WHERE id = %(id)s;
