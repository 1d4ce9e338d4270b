-- 0007: enrichment. Deals whose e-mails changed wait in a queue until summarised (a budget or an
-- outage defers them, nothing forgets them); each job's cursor ("changes since"); and the review
-- list keeps what an operator decided and what each call cost.
CREATE TABLE enrich_queue (
    subject_type  text NOT NULL DEFAULT 'Opportunity',
    subject_id    text NOT NULL,
    changed_at    timestamptz NOT NULL,
    queued_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (subject_type, subject_id)
);
CREATE INDEX enrich_queue_oldest ON enrich_queue (changed_at);

-- Every watch that opens waits for its first summary, in the transaction that opens it: a watch
-- registered late (a replayed event, a slow register run) cannot slip past enrich's cursor.
CREATE FUNCTION enrich_queue_new_watch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO enrich_queue (subject_type, subject_id, changed_at)
    VALUES (NEW.subject_type, NEW.subject_id, NEW.registered_at)
    ON CONFLICT (subject_type, subject_id) DO NOTHING;
    RETURN NEW;
END;
$$;
CREATE TRIGGER watches_enrich_queue AFTER INSERT ON watches
    FOR EACH ROW WHEN (NEW.closed_at IS NULL) EXECUTE FUNCTION enrich_queue_new_watch();

CREATE TABLE job_cursors (
    name        text PRIMARY KEY,
    position    timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

ALTER TABLE enrichments ADD COLUMN source text NOT NULL DEFAULT 'model'
    CONSTRAINT enrichments_source_valid CHECK (source IN ('model', 'review'));
ALTER TABLE review_items ADD COLUMN deal_name text;
ALTER TABLE review_items ADD COLUMN source_text text;
ALTER TABLE review_items ADD COLUMN prompt_tokens integer;
ALTER TABLE review_items ADD COLUMN completion_tokens integer;
ALTER TABLE review_items ADD COLUMN resolution text
    CONSTRAINT review_items_resolution_valid CHECK (resolution IN ('accepted', 'rejected'));
