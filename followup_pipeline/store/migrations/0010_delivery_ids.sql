-- 0010: a Standard Webhooks delivery is recognised by its source and `webhook-id`, the message id
-- the sender keeps across every retry (senders retry for days), not by a hash of its body within
-- an hour. The id is a column of its event, unique per source: a redelivery of that id, whenever
-- it comes, counts as a duplicate of the stored event, and two deliveries of one id at once end in
-- one event (the unique index decides, not a read before the write). The key lives as long as its
-- event row, which nothing deletes (a purge only empties old bodies and headers). EspoCRM
-- deliveries carry no id (NULL): their body-hash rule within the window is unchanged.
ALTER TABLE events ADD COLUMN delivery_id text;
CREATE UNIQUE INDEX events_delivery_id ON events (source, delivery_id)
    WHERE delivery_id IS NOT NULL;

-- The Standard Webhooks events stored before this migration get their id from the headers they
-- kept (a purged event kept none): a retry of such a message after the upgrade is recognised too.
-- The first event of each id takes it; later copies of the same message (what the body-hash rule
-- let through) stay as they are. An id over 255 characters is kept as its SHA-256, as the ingress
-- keeps it (store/events.py: delivery_key).
UPDATE events AS e
SET delivery_id = k.delivery_id
FROM (
    SELECT DISTINCT ON (source, delivery_id) id, delivery_id
    FROM (
        SELECT id, source,
               CASE WHEN length(headers ->> 'webhook-id') <= 255 THEN headers ->> 'webhook-id'
                    ELSE 'sha256:' || encode(sha256(convert_to(headers ->> 'webhook-id', 'UTF8')),
                                             'hex')
               END AS delivery_id
        FROM events
        WHERE source <> 'espocrm' AND coalesce(headers ->> 'webhook-id', '') <> ''
    ) AS ids
    ORDER BY source, delivery_id, id
) AS k
WHERE e.id = k.id;

-- store_delivery takes the delivery id (NULL for EspoCRM). The new parameter comes last with a
-- default, so a caller of the old ten arguments (an ingress not yet restarted) still finds it.
DROP FUNCTION store_delivery(text, text, text, bytea, jsonb, text, text, text, interval, integer);
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
    p_delivery_id  text DEFAULT NULL
) RETURNS TABLE (event_id bigint, event_status text, duplicate boolean)
LANGUAGE plpgsql SET search_path = followup, pg_temp AS $$
BEGIN
    IF p_delivery_id IS NOT NULL THEN
        -- The unique index decides: an insert that meets a committed event of the same id does
        -- nothing, one that meets an uncommitted one waits for it. Then the stored event counts
        -- the duplicate. The loop only repeats if that event vanished in between.
        LOOP
            RETURN QUERY
            INSERT INTO events AS e (source, event_type, dedup_key, body, headers, status,
                                     last_error, dead_step, delivery_id)
            VALUES (p_source, p_event_type, p_dedup_key, p_body, p_headers, p_status,
                    p_last_error, p_dead_step, p_delivery_id)
            ON CONFLICT (source, delivery_id) WHERE delivery_id IS NOT NULL DO NOTHING
            RETURNING e.id, e.status, false;
            IF FOUND THEN
                RETURN;
            END IF;
            RETURN QUERY
            UPDATE events AS e
            SET duplicate_count = e.duplicate_count + 1, last_duplicate_at = now()
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
