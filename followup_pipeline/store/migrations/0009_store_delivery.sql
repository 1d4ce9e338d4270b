-- 0009: the ingress stores a delivery in one round trip. One call does what five statements and
-- a commit did: take the dedup key's lock, count a redelivery within the window on the latest
-- event with that key, or insert the new event. Called in autocommit, the call is its own
-- transaction: its result reaches the client only with the commit (psycopg waits for it), so
-- "200 only after commit" holds. The lock is the two-integer advisory lock in the namespace the
-- ingress always used, held to the end of that transaction.
CREATE FUNCTION store_delivery(
    p_source      text,
    p_event_type  text,
    p_dedup_key   text,
    p_body        bytea,
    p_headers     jsonb,
    p_status      text,
    p_last_error  text,
    p_dead_step   text,
    p_window      interval,
    p_namespace   integer
) RETURNS TABLE (event_id bigint, event_status text, duplicate boolean)
LANGUAGE plpgsql SET search_path = followup, pg_temp AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(p_namespace, hashtext(p_dedup_key));
    RETURN QUERY
    UPDATE events AS e
    SET duplicate_count = e.duplicate_count + 1, last_duplicate_at = now()
    WHERE e.id = (
        SELECT x.id FROM events AS x
        WHERE x.dedup_key = p_dedup_key AND x.received_at > now() - p_window
        ORDER BY x.received_at DESC, x.id DESC
        LIMIT 1
    )
    RETURNING e.id, e.status, true;
    IF FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
    INSERT INTO events AS e (source, event_type, dedup_key, body, headers, status, last_error,
                             dead_step)
    VALUES (p_source, p_event_type, p_dedup_key, p_body, p_headers, p_status, p_last_error,
            p_dead_step)
    RETURNING e.id, e.status, false;
END;
$$;
