-- name: retention_empty_event_bodies
-- One batch of ``followup purge``: empty the raw body and headers of done webhooks older than
-- the retention, after id ``after`` (keyset: each batch starts where the last ended). The row
-- stays: ids, status and dedup keys are history, and its delivery_id (a Standard Webhooks
-- webhook-id, its own column) still recognises a retry of it, however short the retention.
-- Dead and unhandled events keep their bodies (an operator may replay them, an unhandled one
-- once its source has a handler); pending ones are never touched. Emptied rows no longer match,
-- so a second purge counts nothing.
WITH due AS (
    SELECT id FROM events
    WHERE id > %(after)s
      AND status = 'done'
      AND coalesce(processed_at, received_at) < %(before)s
      AND (octet_length(body) > 0 OR headers <> '{}'::jsonb)
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE events
SET body = ''::bytea, headers = '{}'::jsonb
FROM due
WHERE events.id = due.id
RETURNING events.id;

-- name: retention_count_event_bodies
-- What ``followup purge --dry-run`` would empty of the webhook bodies (the same rows as above).
SELECT count(*) AS n FROM events
WHERE status = 'done'
  AND coalesce(processed_at, received_at) < %(before)s
  AND (octet_length(body) > 0 OR headers <> '{}'::jsonb);

-- name: retention_clear_email_text
-- One batch of ``followup purge``: forget the e-mail text of settled review items older than the
-- retention: ``source_text`` (the trimmed, masked e-mails sent to the model) and ``raw_output``
-- (the model's refused answer, which may quote those e-mails). The item itself, its reason,
-- hash and resolution stay. Cleared rows no longer match.
WITH due AS (
    SELECT id FROM review_items
    WHERE id > %(after)s
      AND resolved_at IS NOT NULL
      AND created_at < %(before)s
      AND (source_text IS NOT NULL OR raw_output <> '')
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE review_items
SET source_text = NULL, raw_output = ''
FROM due
WHERE review_items.id = due.id
RETURNING review_items.id;

-- name: retention_count_email_text
-- What ``followup purge --dry-run`` would clear of the review items' e-mail text.
SELECT count(*) AS n FROM review_items
WHERE resolved_at IS NOT NULL
  AND created_at < %(before)s
  AND (source_text IS NOT NULL OR raw_output <> '');

-- name: retention_schema_present
-- Whether the machine's tables exist (migration 0001 creates watches, events and actions at once).
SELECT to_regclass('followup.watches') IS NOT NULL AS present;

-- name: retention_machine_counts
-- What a machine holds, for ``followup backup``'s manifest and ``restore``'s refusal to overwrite.
SELECT
    (SELECT count(*) FROM watches) AS watches,
    (SELECT count(*) FROM actions) AS actions,
    (SELECT count(*) FROM events) AS events;

-- name: retention_other_sessions
-- Other client sessions on this database (a running machine's daemon, webserver, ingress):
-- ``followup restore`` refuses to replace a database that is in use.
SELECT count(*) AS n FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend';

-- name: retention_schema_exists
-- Whether a schema of this name exists (``followup restore`` sets the old one aside first).
SELECT to_regnamespace(%(schema)s) IS NOT NULL AS present;
