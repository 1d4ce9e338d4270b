-- 0033: the ingress's group commit stores a batch of deliveries in one call, set-based: the rows
-- come as JSON arrays (ord, source, event_type, dedup_key, body_at, body_len, headers, status,
-- last_error, dead_step, delivery_id, received_at), those with a delivery id in one of their own
-- (NULL: none), and their bodies as one bytea, each row naming its body's place in it. What a batch answers is what storing its rows one by one, in the order
-- of `ord`, through store_delivery answers:
--   * a delivery with an id (Standard Webhooks, Stripe) goes through store_delivery itself, first,
--     in the order of `ord` (the batcher sorts them by id, so two batches wait on each other's
--     ids in one order);
--   * the others are recognised by their body within the window: the batch takes the advisory
--     lock of each body (in one global order, after the ids: no two batches wait on each other in
--     a circle), finds each body's latest event within the window in one pass, counts the
--     repeats on it, and inserts the bodies not found in one INSERT. A body repeated within the
--     batch is one event, its repeats its duplicates, as they would be one after another. The
--     window counts back from the instant of the body's first delivery in the batch (they all
--     arrived within the batch's few milliseconds).
-- Set-based, the body-hash rows cost about half of what a call of store_delivery per row costs
-- (docs/benchmarks.md, where one delivery's time goes).
--
-- Both functions read `events` only through its indexes, and say so (enable_seqscan off): a plan
-- of store_deliveries made while `events` was empty (a new install, a truncated table) scanned
-- the table for each body's probe, and was kept as the table grew; under load it cost Postgres a
-- whole core (the ingress fell from about 7,000 deliveries a second to 3,500) until an ANALYZE.
-- store_delivery's probe is the same.
ALTER FUNCTION store_delivery(text, text, text, bytea, jsonb, text, text, text, interval, integer,
                              text, timestamptz)
    SET enable_seqscan = off;
CREATE FUNCTION store_deliveries(
    p_identified json,
    p_rows       json,
    p_bodies     bytea,
    p_window     interval,
    p_namespace  integer
) RETURNS TABLE (ord integer, event_id bigint, event_status text, duplicate boolean)
LANGUAGE plpgsql SET search_path = followup, pg_temp SET enable_seqscan = off AS $$
BEGIN
    IF p_identified IS NOT NULL THEN
        RETURN QUERY
        SELECT d.ord, s.event_id, s.event_status, s.duplicate
        FROM json_to_recordset(p_identified) AS d(
            ord int, source text, event_type text, dedup_key text, body_at int, body_len int,
            headers jsonb, status text, last_error text, dead_step text, delivery_id text,
            received_at timestamptz
        )
        CROSS JOIN LATERAL store_delivery(
            d.source, d.event_type, d.dedup_key, substring(p_bodies FROM d.body_at FOR d.body_len),
            d.headers, d.status, d.last_error, d.dead_step, p_window, p_namespace, d.delivery_id,
            d.received_at
        ) AS s;
    END IF;

    PERFORM pg_advisory_xact_lock(p_namespace, k.lock)
    FROM (
        SELECT DISTINCT hashtext(d.dedup_key) AS lock
        FROM json_to_recordset(p_rows) AS d(dedup_key text)
        ORDER BY 1
    ) AS k;

    RETURN QUERY
    WITH d AS (
        SELECT r.ord, r.source, r.event_type, r.dedup_key, r.body_at, r.body_len, r.headers,
               r.status, r.last_error, r.dead_step, coalesce(r.received_at, now()) AS at
        FROM json_to_recordset(p_rows) AS r(
            ord int, source text, event_type text, dedup_key text, body_at int, body_len int,
            headers jsonb, status text, last_error text, dead_step text, received_at timestamptz
        )
    ),
    firsts AS (  -- each body's first delivery in the batch, and its repeats after it
        SELECT DISTINCT ON (d.dedup_key) d.*,
               count(*) OVER per_body - 1 AS repeats,
               max(d.at) OVER per_body AS last_at
        FROM d
        WINDOW per_body AS (PARTITION BY d.dedup_key)
        ORDER BY d.dedup_key, d.ord
    ),
    found AS (
        SELECT f.*, x.id AS known_id, x.status AS known_status
        FROM firsts AS f
        LEFT JOIN LATERAL (
            SELECT e.id, e.status FROM events AS e
            WHERE e.dedup_key = f.dedup_key AND e.received_at > f.at - p_window
            ORDER BY e.received_at DESC, e.id DESC
            LIMIT 1
        ) AS x ON true
    ),
    counted AS (
        UPDATE events AS e
        SET duplicate_count = e.duplicate_count + f.repeats + 1, last_duplicate_at = f.last_at
        FROM found AS f
        WHERE e.id = f.known_id
        RETURNING e.id
    ),
    inserted AS (
        INSERT INTO events AS e (source, event_type, dedup_key, body, headers, status, last_error,
                                 dead_step, received_at, duplicate_count, last_duplicate_at)
        SELECT f.source, f.event_type, f.dedup_key, substring(p_bodies FROM f.body_at FOR f.body_len),
               f.headers, f.status, f.last_error, f.dead_step, f.at, f.repeats,
               CASE WHEN f.repeats > 0 THEN f.last_at END
        FROM found AS f
        WHERE f.known_id IS NULL
        ORDER BY f.ord
        RETURNING e.id, e.dedup_key, e.status
    )
    SELECT d.ord, coalesce(f.known_id, i.id), coalesce(f.known_status, i.status),
           f.known_id IS NOT NULL OR d.ord <> f.ord
    FROM d
    JOIN found AS f ON f.dedup_key = d.dedup_key
    LEFT JOIN inserted AS i ON i.dedup_key = d.dedup_key;
END;
$$;
