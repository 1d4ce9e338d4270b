-- 0020: an event is stamped with the machine's clock, not the database's: store_delivery takes
-- the instant of receipt (the ingress's clock, or the sweep's run clock). Without it (a caller of
-- the old eleven arguments, an ingress not yet restarted) it is the database's now(), as before.
-- The duplicate window counts back from the same instant. With one clock for everything, a
-- simulated month (`followup simulate`) registers its deals on the days they moved.
DROP FUNCTION store_delivery(text, text, text, bytea, jsonb, text, text, text, interval, integer,
                             text);
CREATE FUNCTION store_delivery(
    p_source       text,
    p_event_type   text,
    p_dedup_key    text,
    p_body         bytea,
    p_headers      jsonb,
    p_status       text,
    p_last_error   text,
    p_dead_step    text,
    p_window       interval,
    p_namespace    integer,
    p_delivery_id  text DEFAULT NULL,
    p_received_at  timestamptz DEFAULT NULL
) RETURNS TABLE (event_id bigint, event_status text, duplicate boolean)
LANGUAGE plpgsql SET search_path = followup, pg_temp AS $$
DECLARE
    v_at timestamptz := coalesce(p_received_at, now());
BEGIN
    IF p_delivery_id IS NOT NULL THEN
        -- The unique index decides: an insert that meets a committed event of the same id does
        -- nothing, one that meets an uncommitted one waits for it. Then the stored event counts
        -- the duplicate. The loop only repeats if that event vanished in between.
        LOOP
            RETURN QUERY
            INSERT INTO events AS e (source, event_type, dedup_key, body, headers, status,
                                     last_error, dead_step, delivery_id, received_at)
            VALUES (p_source, p_event_type, p_dedup_key, p_body, p_headers, p_status,
                    p_last_error, p_dead_step, p_delivery_id, v_at)
            ON CONFLICT (source, delivery_id) WHERE delivery_id IS NOT NULL DO NOTHING
            RETURNING e.id, e.status, false;
            IF FOUND THEN
                RETURN;
            END IF;
            RETURN QUERY
            UPDATE events AS e
            SET duplicate_count = e.duplicate_count + 1, last_duplicate_at = v_at
            WHERE e.source = p_source AND e.delivery_id = p_delivery_id
            RETURNING e.id, e.status, true;
            IF FOUND THEN
                RETURN;
            END IF;
        END LOOP;
    END IF;
    PERFORM pg_advisory_xact_lock(p_namespace, hashtext(p_dedup_key));
    RETURN QUERY
    UPDATE events AS e
    SET duplicate_count = e.duplicate_count + 1, last_duplicate_at = v_at
    WHERE e.id = (
        SELECT x.id FROM events AS x
        WHERE x.dedup_key = p_dedup_key AND x.received_at > v_at - p_window
        ORDER BY x.received_at DESC, x.id DESC
        LIMIT 1
    )
    RETURNING e.id, e.status, true;
    IF FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
    INSERT INTO events AS e (source, event_type, dedup_key, body, headers, status, last_error,
                             dead_step, received_at)
    VALUES (p_source, p_event_type, p_dedup_key, p_body, p_headers, p_status, p_last_error,
            p_dead_step, v_at)
    RETURNING e.id, e.status, false;
END;
$$;
