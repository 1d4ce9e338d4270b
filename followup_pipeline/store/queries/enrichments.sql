-- name: latest_summary
-- The newest two-line summary of a deal, if any.
SELECT line1, line2, created_at FROM enrichments
WHERE subject_type = %(subject_type)s AND subject_id = %(subject_id)s
ORDER BY created_at DESC, id DESC
LIMIT 1;

-- name: latest_input_hash
-- The input hash of the deal's latest summary or review item: the same input, no new call.
SELECT input_hash FROM (
    SELECT input_hash, created_at, 1 AS kind, id FROM enrichments
     WHERE subject_type = %(subject_type)s AND subject_id = %(subject_id)s
    UNION ALL
    SELECT input_hash, created_at, 0 AS kind, id FROM review_items
     WHERE subject_type = %(subject_type)s AND subject_id = %(subject_id)s
) latest
ORDER BY created_at DESC, kind DESC, id DESC
LIMIT 1;

-- name: enrichment_insert
INSERT INTO enrichments
    (subject_type, subject_id, input_hash, line1, line2, model, prompt_tokens,
     completion_tokens, source, created_at)
VALUES (%(subject_type)s, %(subject_id)s, %(input_hash)s, %(line1)s, %(line2)s, %(model)s,
        %(prompt_tokens)s, %(completion_tokens)s, %(source)s, %(created_at)s);

-- name: review_item_insert
INSERT INTO review_items
    (subject_type, subject_id, input_hash, model, raw_output, error, deal_name, source_text,
     prompt_tokens, completion_tokens, created_at)
VALUES (%(subject_type)s, %(subject_id)s, %(input_hash)s, %(model)s, %(raw_output)s, %(error)s,
        %(deal_name)s, %(source_text)s, %(prompt_tokens)s, %(completion_tokens)s, %(created_at)s)
RETURNING id;

-- name: review_items_list
-- Review items, open ones first, newest first.
SELECT id, subject_id, deal_name, model, error, raw_output, input_hash, source_text,
       created_at, resolved_at, resolution, subject_type
FROM review_items
WHERE %(all)s OR resolved_at IS NULL
ORDER BY resolved_at IS NOT NULL, created_at DESC, id DESC;

-- name: review_item_by_id
SELECT id, subject_id, deal_name, model, error, raw_output, input_hash, source_text,
       created_at, resolved_at, resolution, subject_type
FROM review_items WHERE id = %(id)s;

-- name: review_item_lock
-- The item, locked until the deciding transaction ends (two operators cannot both settle it).
SELECT id, subject_id, deal_name, model, error, raw_output, input_hash, source_text,
       created_at, resolved_at, resolution, subject_type
FROM review_items WHERE id = %(id)s FOR UPDATE;

-- name: review_item_resolve
-- Resolve an open item; nothing when it was resolved already.
UPDATE review_items SET resolved_at = %(now)s, resolution = %(resolution)s
WHERE id = %(id)s AND resolved_at IS NULL
RETURNING id;

-- name: review_items_open_count
SELECT count(*) AS open FROM review_items WHERE resolved_at IS NULL;

-- name: enrich_enqueue
-- A deal whose e-mails changed (or whose watch is new) waits for a summary; a deal already
-- waiting keeps its oldest change, so the order stays "oldest-changed first".
INSERT INTO enrich_queue (subject_type, subject_id, changed_at)
VALUES (%(subject_type)s, %(subject_id)s, %(changed_at)s)
ON CONFLICT (subject_type, subject_id)
DO UPDATE SET changed_at = least(enrich_queue.changed_at, excluded.changed_at);

-- name: enrich_queue_oldest
SELECT subject_id, changed_at FROM enrich_queue
WHERE subject_type = %(subject_type)s
ORDER BY changed_at, subject_id;

-- name: enrich_dequeue
DELETE FROM enrich_queue WHERE subject_type = %(subject_type)s AND subject_id = %(subject_id)s;

-- name: job_cursor
SELECT position FROM job_cursors WHERE name = %(name)s;

-- name: job_cursor_set
INSERT INTO job_cursors (name, position, updated_at) VALUES (%(name)s, %(position)s, now())
ON CONFLICT (name) DO UPDATE
SET position = greatest(job_cursors.position, excluded.position), updated_at = now();

-- name: enrich_open_watches
-- Open watches among the given deals, or every open watch (enrich's first run).
SELECT subject_id, subject_name, registered_at FROM watches
WHERE closed_at IS NULL AND (%(every)s OR subject_id = ANY(%(subject_ids)s))
ORDER BY registered_at, id;

-- name: enrich_open_watch
SELECT subject_id, subject_name, registered_at FROM watches
WHERE closed_at IS NULL AND subject_id = %(subject_id)s
ORDER BY registered_at DESC, id DESC
LIMIT 1;
