-- 0033: the ingress's group commit stores a batch of deliveries in one call. The rows come as
-- three JSON arrays of (ord, source, event_type, dedup_key, body_at, body_len, headers, status,
-- last_error, dead_step, delivery_id, received_at), NULL for an empty one, and their bodies as one
-- bytea, each row naming its body's place in it:
--   * `identified`: the deliveries with an id (Standard Webhooks, Stripe), sorted by id;
--   * `repeated`: those without an id whose body comes more than once in the batch, in arrival
--     order;
--   * `rows`: the others, each body once.
-- What a batch answers, and what it leaves in `events`, is what storing its deliveries one by
-- one through store_delivery answers and leaves (the ingress sorts the deliveries with an id
-- first; the others keep their arrival order):
--   * the identified go through store_delivery, first, in their order: two batches wait on each
--     other's ids in one order;
--   * then the batch takes the advisory lock of every body of `repeated` and `rows`, in one
--     global order (after the ids: no two batches can wait on each other in a circle);
--   * the repeated go through store_delivery in their order (each repeat a duplicate of the one
--     before, as one after another; the window counted from each one's own instant);
--   * the rows, each body once, set-based: each body's latest event within the window found in
--     one pass and counted, the bodies not found inserted by one INSERT.
-- Set-based, a row of a batch of 32 costs 44 µs where a call of store_delivery per row cost 54 µs
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
    p_repeated   json,
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
        FROM (
            SELECT r.dedup_key FROM json_to_recordset(p_rows) AS r(dedup_key text)
            UNION ALL
            SELECT r.dedup_key FROM json_to_recordset(p_repeated) AS r(dedup_key text)
        ) AS d
        ORDER BY 1
    ) AS k;

    IF p_repeated IS NOT NULL THEN
        RETURN QUERY
        SELECT d.ord, s.event_id, s.event_status, s.duplicate
        FROM json_to_recordset(p_repeated) AS d(
            ord int, source text, event_type text, dedup_key text, body_at int, body_len int,
            headers jsonb, status text, last_error text, dead_step text, received_at timestamptz
        )
        CROSS JOIN LATERAL store_delivery(
            d.source, d.event_type, d.dedup_key, substring(p_bodies FROM d.body_at FOR d.body_len),
            d.headers, d.status, d.last_error, d.dead_step, p_window, p_namespace, NULL,
            d.received_at
        ) AS s;
    END IF;

    RETURN QUERY
    WITH d AS (
        SELECT r.ord, r.source, r.event_type, r.dedup_key, r.body_at, r.body_len, r.headers,
               r.status, r.last_error, r.dead_step, coalesce(r.received_at, now()) AS at
        FROM json_to_recordset(p_rows) AS r(
            ord int, source text, event_type text, dedup_key text, body_at int, body_len int,
            headers jsonb, status text, last_error text, dead_step text, received_at timestamptz
        )
    ),
    found AS (
        SELECT d.*, x.id AS known_id
        FROM d
        LEFT JOIN LATERAL (
            SELECT e.id FROM events AS e
            WHERE e.dedup_key = d.dedup_key AND e.received_at > d.at - p_window
            ORDER BY e.received_at DESC, e.id DESC
            LIMIT 1
        ) AS x ON true
    ),
    counted AS (
        UPDATE events AS e
        SET duplicate_count = e.duplicate_count + 1, last_duplicate_at = f.at
        FROM found AS f
        WHERE e.id = f.known_id
        RETURNING e.id, e.status
    ),
    inserted AS (
        INSERT INTO events AS e (source, event_type, dedup_key, body, headers, status, last_error,
                                 dead_step, received_at)
        SELECT f.source, f.event_type, f.dedup_key, substring(p_bodies FROM f.body_at FOR f.body_len),
               f.headers, f.status, f.last_error, f.dead_step, f.at
        FROM found AS f
        WHERE f.known_id IS NULL
        ORDER BY f.ord
        RETURNING e.id, e.dedup_key, e.status
    )
    SELECT f.ord, coalesce(c.id, i.id), coalesce(c.status, i.status), c.id IS NOT NULL
    FROM found AS f
    LEFT JOIN counted AS c ON c.id = f.known_id
    LEFT JOIN inserted AS i ON i.dedup_key = f.dedup_key AND f.known_id IS NULL;
END;
$$;
