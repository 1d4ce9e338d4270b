-- name: insert_watch
-- Open a watch unless the deal has one open already (a redelivery never resets a cadence).
INSERT INTO watches (
    subject_type, subject_id, subject_name, account_name, assigned_user_id, assigned_user_name,
    stage, cadence_name, offsets, time_zone, base_on, registered_at, registered_by,
    source_event_id, crm_url
) VALUES (
    %(subject_type)s, %(subject_id)s, %(subject_name)s, %(account_name)s, %(assigned_user_id)s,
    %(assigned_user_name)s, %(stage)s, %(cadence_name)s, %(offsets)s, %(time_zone)s, %(base_on)s,
    %(registered_at)s, %(registered_by)s, %(source_event_id)s, %(crm_url)s
)
ON CONFLICT (subject_type, subject_id) WHERE closed_at IS NULL DO NOTHING
RETURNING id;

-- name: insert_step
-- One planned step of a watch.
INSERT INTO watch_steps (watch_id, step_no, offset_days, due_on)
VALUES (%(watch_id)s, %(step_no)s, %(offset_days)s, %(due_on)s);

-- name: open_watch_of_subject
-- The open watch of a deal, if any.
SELECT * FROM watches
WHERE subject_type = %(subject_type)s AND subject_id = %(subject_id)s AND closed_at IS NULL;

-- name: latest_watch_of_subject
-- The most recent watch of a deal, open or closed.
SELECT * FROM watches
WHERE subject_type = %(subject_type)s AND subject_id = %(subject_id)s
ORDER BY registered_at DESC, id DESC
LIMIT 1;

-- name: close_watch
-- Close an open watch with its reason; a closed watch stays as it was.
UPDATE watches SET closed_at = %(closed_at)s, closed_reason = %(reason)s
WHERE id = %(watch_id)s AND closed_at IS NULL
RETURNING id;

-- name: steps_of_watch
-- Every step of a watch, in order.
SELECT * FROM watch_steps WHERE watch_id = %(watch_id)s ORDER BY step_no;
