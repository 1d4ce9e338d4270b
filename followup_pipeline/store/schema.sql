-- The followup schema after every migration: a normalised pg_dump --schema-only.
-- Generated; do not edit. Regenerate with: python -m followup_pipeline_tests.store.dump_schema (or: make schema)

CREATE SCHEMA followup;

CREATE FUNCTION followup.enrich_queue_new_watch() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO enrich_queue (subject_type, subject_id, changed_at)
    VALUES (NEW.subject_type, NEW.subject_id, NEW.registered_at)
    ON CONFLICT (subject_type, subject_id) DO NOTHING;
    RETURN NEW;
END;
$$;

CREATE FUNCTION followup.store_deliveries(p_identified json, p_repeated json, p_rows json, p_bodies bytea, p_window interval, p_namespace integer) RETURNS TABLE(ord integer, event_id bigint, event_status text, duplicate boolean)
    LANGUAGE plpgsql
    SET search_path TO 'followup', 'pg_temp'
    SET enable_seqscan TO 'off'
    AS $$
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

CREATE FUNCTION followup.store_delivery(p_source text, p_event_type text, p_dedup_key text, p_body bytea, p_headers jsonb, p_status text, p_last_error text, p_dead_step text, p_window interval, p_namespace integer, p_delivery_id text DEFAULT NULL::text, p_received_at timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS TABLE(event_id bigint, event_status text, duplicate boolean)
    LANGUAGE plpgsql
    SET search_path TO 'followup', 'pg_temp'
    SET enable_seqscan TO 'off'
    AS $$
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

CREATE TABLE followup.action_attempts (
    id bigint NOT NULL,
    action_id bigint NOT NULL,
    attempt_no integer NOT NULL,
    started_at timestamp with time zone NOT NULL,
    finished_at timestamp with time zone,
    outcome text NOT NULL,
    provider_ref text,
    error text,
    run_id text,
    CONSTRAINT action_attempts_attempt_no_check CHECK ((attempt_no >= 1)),
    CONSTRAINT action_attempts_outcome_valid CHECK ((outcome = ANY (ARRAY['attempted'::text, 'accepted'::text, 'confirmed'::text, 'suppressed'::text, 'failed'::text, 'unknown'::text])))
);

ALTER TABLE followup.action_attempts ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME followup.action_attempts_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE followup.actions (
    id bigint NOT NULL,
    idempotency_key text NOT NULL,
    kind text NOT NULL,
    watch_id bigint,
    step_no integer,
    due_at timestamp with time zone NOT NULL,
    time_zone text NOT NULL,
    outcome text NOT NULL,
    reason text,
    provider_ref text,
    payload jsonb DEFAULT '{}'::jsonb NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    last_error text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    replayed_attempts integer DEFAULT 0 NOT NULL,
    CONSTRAINT actions_attempts_check CHECK ((attempts >= 0)),
    CONSTRAINT actions_kind_valid CHECK ((kind = ANY (ARRAY['task'::text, 'close_task'::text, 'task_update'::text, 'report'::text, 'alert'::text, 'crm_lead'::text, 'reminder'::text, 'certificate'::text, 'publication'::text]))),
    CONSTRAINT actions_outcome_valid CHECK ((outcome = ANY (ARRAY['attempted'::text, 'accepted'::text, 'confirmed'::text, 'suppressed'::text, 'failed'::text, 'unknown'::text]))),
    CONSTRAINT actions_reason_valid CHECK ((reason = ANY (ARRAY['deal_closed'::text, 'superseded'::text, 'paused'::text, 'dry_run'::text, 'nothing_due'::text, 'shadow'::text, 'completed'::text, 'opted_out'::text, 'expired'::text, 'decided'::text]))),
    CONSTRAINT actions_replayed_attempts_valid CHECK ((replayed_attempts >= 0)),
    CONSTRAINT actions_suppressed_has_reason CHECK (((outcome = 'suppressed'::text) = (reason IS NOT NULL)))
);

ALTER TABLE followup.actions ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME followup.actions_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE followup.alerts (
    id bigint CONSTRAINT alerts_id_not_null1 NOT NULL,
    kind text NOT NULL,
    source text NOT NULL,
    fingerprint text CONSTRAINT alerts_fingerprint_not_null1 NOT NULL,
    subject text NOT NULL,
    message text CONSTRAINT alerts_message_not_null1 NOT NULL,
    run_id text,
    occurred_at timestamp with time zone CONSTRAINT alerts_occurred_at_not_null1 NOT NULL,
    recorded_at timestamp with time zone DEFAULT now() NOT NULL,
    action_key text,
    held integer DEFAULT 0 NOT NULL,
    counted_in text,
    also_to text[] DEFAULT '{}'::text[] NOT NULL,
    CONSTRAINT alerts_kind_valid CHECK ((kind = ANY (ARRAY['run_failure'::text, 'dead_letter'::text, 'pending_events'::text, 'stale_evaluate'::text, 'catch_up'::text, 'degraded'::text, 'recovered'::text, 'watchdog'::text, 'healed'::text, 'census'::text])))
);

ALTER TABLE followup.alerts ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME followup.alerts_id_seq1
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE followup.audit_log (
    id bigint NOT NULL,
    at timestamp with time zone DEFAULT now() NOT NULL,
    actor text NOT NULL,
    action text NOT NULL,
    subject text,
    detail text,
    reason text,
    CONSTRAINT audit_log_action_valid CHECK ((action ~ '^[a-z][a-z_.]*$'::text)),
    CONSTRAINT audit_log_actor_given CHECK ((length(btrim(actor)) > 0))
);

ALTER TABLE followup.audit_log ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME followup.audit_log_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE followup.cadences (
    name text NOT NULL,
    offsets integer[] NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT cadences_offsets_valid CHECK (((cardinality(offsets) > 0) AND (array_position(offsets, NULL::integer) IS NULL) AND (offsets[1] >= 1)))
);

CREATE TABLE followup.company_lookups (
    domain text NOT NULL,
    found boolean NOT NULL,
    company jsonb,
    looked_up_at timestamp with time zone NOT NULL,
    expires_at timestamp with time zone NOT NULL
);

CREATE TABLE followup.deal_marks (
    subject_type text DEFAULT 'Opportunity'::text NOT NULL,
    subject_id text NOT NULL,
    last_event_id bigint NOT NULL,
    last_received_at timestamp with time zone NOT NULL
);

CREATE TABLE followup.enrich_queue (
    subject_type text DEFAULT 'Opportunity'::text NOT NULL,
    subject_id text NOT NULL,
    changed_at timestamp with time zone NOT NULL,
    queued_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE followup.enrichments (
    id bigint NOT NULL,
    subject_type text DEFAULT 'Opportunity'::text NOT NULL,
    subject_id text NOT NULL,
    input_hash text NOT NULL,
    line1 text NOT NULL,
    line2 text NOT NULL,
    model text NOT NULL,
    prompt_tokens integer,
    completion_tokens integer,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    source text DEFAULT 'model'::text NOT NULL,
    CONSTRAINT enrichments_source_valid CHECK ((source = ANY (ARRAY['model'::text, 'review'::text])))
);

ALTER TABLE followup.enrichments ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME followup.enrichments_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE followup.events (
    id bigint NOT NULL,
    source text NOT NULL,
    event_type text,
    dedup_key text NOT NULL,
    body bytea NOT NULL,
    headers jsonb DEFAULT '{}'::jsonb NOT NULL,
    received_at timestamp with time zone DEFAULT now() NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    next_attempt_at timestamp with time zone DEFAULT now() NOT NULL,
    last_error text,
    dead_step text,
    duplicate_count integer DEFAULT 0 NOT NULL,
    last_duplicate_at timestamp with time zone,
    processed_at timestamp with time zone,
    claimed_until timestamp with time zone,
    claimed_by text,
    delivery_id text,
    run_stops integer DEFAULT 0 NOT NULL,
    CONSTRAINT events_attempts_check CHECK ((attempts >= 0)),
    CONSTRAINT events_duplicate_count_check CHECK ((duplicate_count >= 0)),
    CONSTRAINT events_run_stops_check CHECK ((run_stops >= 0)),
    CONSTRAINT events_status_valid CHECK ((status = ANY (ARRAY['pending'::text, 'done'::text, 'dead'::text, 'unhandled'::text])))
);

ALTER TABLE followup.events ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME followup.events_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE followup.holidays (
    day date NOT NULL,
    kind text NOT NULL,
    name text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT holidays_kind_valid CHECK ((kind = ANY (ARRAY['holiday'::text, 'workday'::text])))
);

CREATE TABLE followup.job_cursors (
    name text NOT NULL,
    "position" timestamp with time zone NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE followup.lead_classifications (
    id bigint NOT NULL,
    event_id bigint NOT NULL,
    lead_id bigint NOT NULL,
    segment text NOT NULL,
    intent text NOT NULL,
    priority integer NOT NULL,
    summary text NOT NULL,
    language text NOT NULL,
    reasons text[] NOT NULL,
    model text NOT NULL,
    source text NOT NULL,
    prompt_tokens integer,
    completion_tokens integer,
    created_at timestamp with time zone NOT NULL,
    from_message boolean DEFAULT true NOT NULL,
    answer jsonb,
    CONSTRAINT lead_classifications_priority_valid CHECK (((priority >= 1) AND (priority <= 4))),
    CONSTRAINT lead_classifications_source_valid CHECK ((source = ANY (ARRAY['model'::text, 'review'::text])))
);

ALTER TABLE followup.lead_classifications ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME followup.lead_classifications_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE followup.lead_events (
    id bigint NOT NULL,
    lead_id bigint NOT NULL,
    event_id bigint NOT NULL,
    source text NOT NULL,
    kind text NOT NULL,
    received_at timestamp with time zone NOT NULL,
    amount numeric,
    currency text,
    page text,
    message text,
    crm_lead_id text,
    amount_unit text,
    CONSTRAINT lead_events_amount_unit_given CHECK (((amount IS NULL) = (amount_unit IS NULL))),
    CONSTRAINT lead_events_amount_unit_valid CHECK ((amount_unit = ANY (ARRAY['major'::text, 'minor'::text]))),
    CONSTRAINT lead_events_kind_valid CHECK ((kind = ANY (ARRAY['form'::text, 'payment'::text, 'crm'::text])))
);

ALTER TABLE followup.lead_events ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME followup.lead_events_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE followup.lead_intake_mode (
    id boolean DEFAULT true NOT NULL,
    mode text NOT NULL,
    changed_at timestamp with time zone DEFAULT now() NOT NULL,
    changed_by text NOT NULL,
    CONSTRAINT lead_intake_mode_one_row CHECK (id),
    CONSTRAINT lead_intake_mode_valid CHECK ((mode = ANY (ARRAY['shadow'::text, 'live'::text])))
);

CREATE TABLE followup.leads (
    id bigint NOT NULL,
    email text NOT NULL,
    name text,
    company text,
    phone text,
    consent boolean,
    consent_at timestamp with time zone,
    first_source text NOT NULL,
    first_seen_at timestamp with time zone NOT NULL,
    last_seen_at timestamp with time zone NOT NULL,
    crm_lead_id text,
    company_domain text,
    company_facts jsonb,
    crm_written_at timestamp with time zone,
    crm_fields jsonb DEFAULT '{}'::jsonb NOT NULL
);

ALTER TABLE followup.leads ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME followup.leads_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE followup.links (
    id text NOT NULL,
    purpose text NOT NULL,
    subject text NOT NULL,
    tenant_id text NOT NULL,
    learner_id bigint,
    content_id text,
    version integer,
    work_item_id bigint,
    expires_at timestamp with time zone NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    used_at timestamp with time zone,
    uses integer DEFAULT 0 NOT NULL,
    CONSTRAINT links_bound CHECK ((((purpose = 'opt_out'::text) AND (learner_id IS NOT NULL)) OR ((purpose = 'approve'::text) AND (content_id IS NOT NULL) AND (version IS NOT NULL)) OR ((purpose = 'acknowledge'::text) AND (work_item_id IS NOT NULL)))),
    CONSTRAINT links_id_check CHECK ((id ~ '^[A-Za-z0-9_-]{16,64}$'::text)),
    CONSTRAINT links_purpose_check CHECK ((purpose = ANY (ARRAY['opt_out'::text, 'approve'::text, 'acknowledge'::text]))),
    CONSTRAINT links_uses_check CHECK ((uses >= 0))
);

CREATE TABLE followup.lms_assignments (
    tenant_id text NOT NULL,
    learner_id bigint NOT NULL,
    quiz_id bigint NOT NULL,
    course_id bigint NOT NULL,
    coursemodule bigint NOT NULL,
    learner_name text,
    learner_email text,
    quiz_name text NOT NULL,
    due_at timestamp with time zone,
    completed_at timestamp with time zone,
    synced_at timestamp with time zone NOT NULL,
    last_successful_action_at timestamp with time zone
);

CREATE TABLE followup.lms_certificates (
    tenant_id text NOT NULL,
    learner_id bigint NOT NULL,
    course_id bigint NOT NULL,
    group_id bigint NOT NULL,
    learner_name text,
    learner_email text,
    completed_at timestamp with time zone NOT NULL,
    generation integer DEFAULT 1 NOT NULL,
    idempotency_key text NOT NULL,
    state text DEFAULT 'missing'::text NOT NULL,
    reason text,
    credential_id text,
    confirmed_at timestamp with time zone,
    lost_at timestamp with time zone,
    seen_at timestamp with time zone NOT NULL,
    CONSTRAINT lms_certificates_generation_check CHECK ((generation > 0)),
    CONSTRAINT lms_certificates_state_valid CHECK ((state = ANY (ARRAY['missing'::text, 'attempted'::text, 'issued'::text, 'confirmed'::text, 'suppressed'::text, 'failed'::text, 'unknown'::text]))),
    CONSTRAINT lms_certificates_suppressed_has_reason CHECK (((state = 'suppressed'::text) = (reason IS NOT NULL)))
);

CREATE TABLE followup.lms_content (
    tenant_id text NOT NULL,
    content_id text NOT NULL,
    version integer NOT NULL,
    title text NOT NULL,
    course_id bigint NOT NULL,
    cmid bigint NOT NULL,
    publish_at timestamp with time zone NOT NULL,
    approved_by text,
    approved_at timestamp with time zone,
    state text DEFAULT 'waiting'::text NOT NULL,
    reason text,
    idempotency_key text NOT NULL,
    published_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT lms_content_approval_whole CHECK (((approved_by IS NULL) = (approved_at IS NULL))),
    CONSTRAINT lms_content_id_valid CHECK ((content_id ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$'::text)),
    CONSTRAINT lms_content_state_valid CHECK ((state = ANY (ARRAY['waiting'::text, 'attempted'::text, 'published'::text, 'confirmed'::text, 'superseded'::text, 'failed'::text, 'unknown'::text]))),
    CONSTRAINT lms_content_version_check CHECK ((version > 0))
);

CREATE TABLE followup.lms_learners (
    tenant_id text NOT NULL,
    learner_id bigint NOT NULL,
    lang text,
    time_zone text,
    seen_at timestamp with time zone NOT NULL
);

CREATE TABLE followup.lms_opt_outs (
    tenant_id text NOT NULL,
    learner_id bigint NOT NULL,
    action_type text DEFAULT 'all'::text NOT NULL,
    opted_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE followup.lms_reminders (
    id bigint NOT NULL,
    tenant_id text NOT NULL,
    learner_id bigint NOT NULL,
    assignment_id bigint NOT NULL,
    action_type text NOT NULL,
    due_at timestamp with time zone NOT NULL,
    time_zone text NOT NULL,
    local_day date NOT NULL,
    idempotency_key text NOT NULL,
    delivery_outcome text DEFAULT 'planned'::text NOT NULL,
    reason text,
    settled_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT lms_reminders_action_type_valid CHECK ((action_type = ANY (ARRAY['before_due'::text, 'due_day'::text, 'overdue'::text]))),
    CONSTRAINT lms_reminders_outcome_valid CHECK ((delivery_outcome = ANY (ARRAY['planned'::text, 'attempted'::text, 'accepted'::text, 'confirmed'::text, 'suppressed'::text, 'failed'::text, 'unknown'::text]))),
    CONSTRAINT lms_reminders_suppressed_has_reason CHECK (((delivery_outcome = 'suppressed'::text) = (reason IS NOT NULL)))
);

ALTER TABLE followup.lms_reminders ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME followup.lms_reminders_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE followup.review_items (
    id bigint NOT NULL,
    subject_type text DEFAULT 'Opportunity'::text NOT NULL,
    subject_id text NOT NULL,
    input_hash text NOT NULL,
    model text NOT NULL,
    raw_output text NOT NULL,
    error text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    resolved_at timestamp with time zone,
    deal_name text,
    source_text text,
    prompt_tokens integer,
    completion_tokens integer,
    resolution text,
    CONSTRAINT review_items_resolution_valid CHECK ((resolution = ANY (ARRAY['accepted'::text, 'rejected'::text])))
);

ALTER TABLE followup.review_items ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME followup.review_items_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE followup.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE followup.stage_census (
    day date NOT NULL,
    stage text NOT NULL,
    listed integer NOT NULL,
    recorded_at timestamp with time zone NOT NULL,
    CONSTRAINT stage_census_listed_check CHECK ((listed >= 0))
);

CREATE TABLE followup.stage_entries (
    id bigint NOT NULL,
    watch_id bigint NOT NULL,
    stage text NOT NULL,
    entered_at timestamp with time zone NOT NULL
);

ALTER TABLE followup.stage_entries ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME followup.stage_entries_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE followup.step_completions (
    key text NOT NULL,
    event_id bigint,
    completed_at timestamp with time zone DEFAULT now() NOT NULL,
    result jsonb
);

CREATE TABLE followup.task_completions (
    id bigint NOT NULL,
    task_id text NOT NULL,
    watch_id bigint NOT NULL,
    step_no integer NOT NULL,
    status text NOT NULL,
    completed_at timestamp with time zone NOT NULL,
    read_at timestamp with time zone NOT NULL,
    run_id text,
    counted boolean NOT NULL
);

ALTER TABLE followup.task_completions ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME followup.task_completions_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE followup.tenants (
    id text NOT NULL,
    name text NOT NULL,
    moodle_url text NOT NULL,
    token_ref text NOT NULL,
    time_zone text NOT NULL,
    holiday_country text DEFAULT 'DE'::text NOT NULL,
    holiday_subdivision text,
    channel text DEFAULT 'email'::text NOT NULL,
    sender text,
    course_ids bigint[] DEFAULT '{}'::bigint[] NOT NULL,
    before_days integer DEFAULT 2 NOT NULL,
    after_business_days integer DEFAULT 3 NOT NULL,
    remind_at time without time zone DEFAULT '09:00:00'::time without time zone NOT NULL,
    hours_start integer DEFAULT 8 NOT NULL,
    hours_end integer DEFAULT 18 NOT NULL,
    mode text DEFAULT 'dry'::text NOT NULL,
    owner text,
    backup text,
    synced_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    credential_token_ref text,
    credential_groups jsonb DEFAULT '{}'::jsonb NOT NULL,
    certificates_checked_at timestamp with time zone,
    reached_at timestamp with time zone,
    unreachable_since timestamp with time zone,
    unreachable_error text,
    language text DEFAULT 'en'::text NOT NULL,
    CONSTRAINT tenants_after_business_days_check CHECK (((after_business_days >= 1) AND (after_business_days <= 30))),
    CONSTRAINT tenants_before_days_check CHECK (((before_days >= 0) AND (before_days <= 30))),
    CONSTRAINT tenants_channel_valid CHECK ((channel = ANY (ARRAY['email'::text, 'moodle'::text]))),
    CONSTRAINT tenants_credential_groups_valid CHECK ((jsonb_typeof(credential_groups) = 'object'::text)),
    CONSTRAINT tenants_credential_token_ref_valid CHECK ((credential_token_ref ~ '^[A-Z][A-Z0-9_]{0,99}$'::text)),
    CONSTRAINT tenants_email_has_sender CHECK (((channel <> 'email'::text) OR (sender IS NOT NULL))),
    CONSTRAINT tenants_hours_end_check CHECK (((hours_end >= 1) AND (hours_end <= 24))),
    CONSTRAINT tenants_hours_start_check CHECK (((hours_start >= 0) AND (hours_start <= 23))),
    CONSTRAINT tenants_hours_valid CHECK ((hours_start < hours_end)),
    CONSTRAINT tenants_id_valid CHECK ((id ~ '^[a-z0-9][a-z0-9-]{0,62}$'::text)),
    CONSTRAINT tenants_language_valid CHECK ((language ~ '^[a-z]{2}$'::text)),
    CONSTRAINT tenants_mode_valid CHECK ((mode = ANY (ARRAY['off'::text, 'dry'::text, 'live'::text]))),
    CONSTRAINT tenants_token_ref_valid CHECK ((token_ref ~ '^[A-Z][A-Z0-9_]{0,99}$'::text))
);

CREATE TABLE followup.watch_steps (
    id bigint NOT NULL,
    watch_id bigint NOT NULL,
    step_no integer NOT NULL,
    offset_days integer NOT NULL,
    due_on date NOT NULL,
    fired_at timestamp with time zone,
    task_ref text,
    skipped_at timestamp with time zone,
    skip_reason text,
    task_summary text,
    overtaken_at timestamp with time zone,
    overtaken_by text,
    task_url text,
    CONSTRAINT watch_steps_fired_has_task CHECK (((fired_at IS NULL) = (task_ref IS NULL))),
    CONSTRAINT watch_steps_fired_or_skipped CHECK (((fired_at IS NULL) OR (skipped_at IS NULL))),
    CONSTRAINT watch_steps_offset_days_check CHECK ((offset_days >= 1)),
    CONSTRAINT watch_steps_overtaken_by_valid CHECK ((overtaken_by = ANY (ARRAY['email'::text, 'call'::text, 'meeting'::text, 'task'::text]))),
    CONSTRAINT watch_steps_overtaken_has_kind CHECK (((overtaken_at IS NULL) = (overtaken_by IS NULL))),
    CONSTRAINT watch_steps_skip_reason_valid CHECK ((skip_reason = ANY (ARRAY['deal_closed'::text, 'superseded'::text, 'paused'::text, 'decided'::text]))),
    CONSTRAINT watch_steps_skipped_has_reason CHECK (((skipped_at IS NULL) = (skip_reason IS NULL))),
    CONSTRAINT watch_steps_step_no_check CHECK ((step_no >= 1)),
    CONSTRAINT watch_steps_task_url_has_task CHECK (((task_url IS NULL) OR ((task_ref IS NOT NULL) AND (task_ref <> 'dry-run'::text))))
);

ALTER TABLE followup.watch_steps ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME followup.watch_steps_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE followup.watches (
    id bigint NOT NULL,
    subject_type text DEFAULT 'Opportunity'::text NOT NULL,
    subject_id text NOT NULL,
    subject_name text NOT NULL,
    account_name text,
    assigned_user_id text,
    stage text NOT NULL,
    cadence_name text NOT NULL,
    offsets integer[] NOT NULL,
    time_zone text NOT NULL,
    base_on date NOT NULL,
    registered_at timestamp with time zone NOT NULL,
    registered_by text NOT NULL,
    source_event_id bigint,
    last_reset_at timestamp with time zone,
    paused_at timestamp with time zone,
    closed_at timestamp with time zone,
    closed_reason text,
    assigned_user_name text,
    crm_url text,
    last_error text,
    last_error_at timestamp with time zone,
    last_reset_kind text,
    amount numeric,
    amount_currency text,
    paused_until date,
    CONSTRAINT watches_closed_has_reason CHECK (((closed_at IS NULL) = (closed_reason IS NULL))),
    CONSTRAINT watches_closed_reason_valid CHECK ((closed_reason = ANY (ARRAY['won'::text, 'lost'::text, 'exhausted'::text, 'subject_gone'::text, 'out_of_scope'::text, 'unwatched'::text]))),
    CONSTRAINT watches_last_reset_kind_valid CHECK ((last_reset_kind = ANY (ARRAY['email'::text, 'call'::text, 'meeting'::text, 'task'::text]))),
    CONSTRAINT watches_registered_by_valid CHECK ((registered_by = ANY (ARRAY['webhook'::text, 'reconcile'::text, 'operator'::text])))
);

ALTER TABLE followup.watches ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME followup.watches_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE followup.work_items (
    id bigint NOT NULL,
    subject text NOT NULL,
    pipeline text NOT NULL,
    kind text NOT NULL,
    tenant_id text,
    what text NOT NULL,
    reason text NOT NULL,
    step text,
    error text,
    event_id bigint,
    action_key text,
    owner text NOT NULL,
    backup text,
    state text DEFAULT 'open'::text NOT NULL,
    opened_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    failed_at timestamp with time zone NOT NULL,
    failures integer DEFAULT 1 NOT NULL,
    alerted integer DEFAULT 0 NOT NULL,
    acknowledged_by text,
    acknowledged_at timestamp with time zone,
    replays integer DEFAULT 0 NOT NULL,
    replayed_by text,
    replayed_at timestamp with time zone,
    closed_at timestamp with time zone,
    closed_how text,
    closed_by text,
    closed_note text,
    CONSTRAINT work_items_ack_whole CHECK (((acknowledged_at IS NULL) = (acknowledged_by IS NULL))),
    CONSTRAINT work_items_alerted_check CHECK ((alerted >= 0)),
    CONSTRAINT work_items_closed_how_valid CHECK ((closed_how = ANY (ARRAY['replayed'::text, 'resolved'::text, 'decided'::text, 'expired'::text]))),
    CONSTRAINT work_items_closed_whole CHECK ((((state = 'closed'::text) = (closed_at IS NOT NULL)) AND ((closed_at IS NULL) = (closed_how IS NULL)))),
    CONSTRAINT work_items_decided_by_someone CHECK (((closed_how IS DISTINCT FROM 'decided'::text) OR ((closed_by IS NOT NULL) AND (closed_note IS NOT NULL)))),
    CONSTRAINT work_items_failures_check CHECK ((failures >= 1)),
    CONSTRAINT work_items_kind_valid CHECK ((kind = ANY (ARRAY['dead_event'::text, 'dead_action'::text, 'invalid_item'::text, 'reminder'::text, 'certificate'::text, 'publication'::text, 'step'::text]))),
    CONSTRAINT work_items_pipeline_valid CHECK ((pipeline = ANY (ARRAY['deal_followup'::text, 'lead_intake'::text, 'learning'::text, 'operations'::text]))),
    CONSTRAINT work_items_replays_check CHECK ((replays >= 0)),
    CONSTRAINT work_items_state_valid CHECK ((state = ANY (ARRAY['open'::text, 'acknowledged'::text, 'closed'::text])))
);

ALTER TABLE followup.work_items ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME followup.work_items_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY followup.action_attempts
    ADD CONSTRAINT action_attempts_pkey PRIMARY KEY (id);

ALTER TABLE ONLY followup.action_attempts
    ADD CONSTRAINT action_attempts_unique UNIQUE (action_id, attempt_no);

ALTER TABLE ONLY followup.actions
    ADD CONSTRAINT actions_key_unique UNIQUE (idempotency_key);

ALTER TABLE ONLY followup.actions
    ADD CONSTRAINT actions_pkey PRIMARY KEY (id);

ALTER TABLE ONLY followup.alerts
    ADD CONSTRAINT alerts_pkey PRIMARY KEY (id);

ALTER TABLE ONLY followup.alerts
    ADD CONSTRAINT alerts_unique_source UNIQUE (source);

ALTER TABLE ONLY followup.audit_log
    ADD CONSTRAINT audit_log_pkey PRIMARY KEY (id);

ALTER TABLE ONLY followup.cadences
    ADD CONSTRAINT cadences_pkey PRIMARY KEY (name);

ALTER TABLE ONLY followup.company_lookups
    ADD CONSTRAINT company_lookups_pkey PRIMARY KEY (domain);

ALTER TABLE ONLY followup.deal_marks
    ADD CONSTRAINT deal_marks_pkey PRIMARY KEY (subject_type, subject_id);

ALTER TABLE ONLY followup.enrich_queue
    ADD CONSTRAINT enrich_queue_pkey PRIMARY KEY (subject_type, subject_id);

ALTER TABLE ONLY followup.enrichments
    ADD CONSTRAINT enrichments_pkey PRIMARY KEY (id);

ALTER TABLE ONLY followup.enrichments
    ADD CONSTRAINT enrichments_unique_input UNIQUE (subject_type, subject_id, input_hash);

ALTER TABLE ONLY followup.events
    ADD CONSTRAINT events_pkey PRIMARY KEY (id);

ALTER TABLE ONLY followup.holidays
    ADD CONSTRAINT holidays_pkey PRIMARY KEY (day);

ALTER TABLE ONLY followup.job_cursors
    ADD CONSTRAINT job_cursors_pkey PRIMARY KEY (name);

ALTER TABLE ONLY followup.lead_classifications
    ADD CONSTRAINT lead_classifications_event_unique UNIQUE (event_id);

ALTER TABLE ONLY followup.lead_classifications
    ADD CONSTRAINT lead_classifications_pkey PRIMARY KEY (id);

ALTER TABLE ONLY followup.lead_events
    ADD CONSTRAINT lead_events_event_unique UNIQUE (event_id);

ALTER TABLE ONLY followup.lead_events
    ADD CONSTRAINT lead_events_pkey PRIMARY KEY (id);

ALTER TABLE ONLY followup.lead_intake_mode
    ADD CONSTRAINT lead_intake_mode_pkey PRIMARY KEY (id);

ALTER TABLE ONLY followup.leads
    ADD CONSTRAINT leads_email_unique UNIQUE (email);

ALTER TABLE ONLY followup.leads
    ADD CONSTRAINT leads_pkey PRIMARY KEY (id);

ALTER TABLE ONLY followup.links
    ADD CONSTRAINT links_pkey PRIMARY KEY (id);

ALTER TABLE ONLY followup.lms_assignments
    ADD CONSTRAINT lms_assignments_pkey PRIMARY KEY (tenant_id, learner_id, quiz_id);

ALTER TABLE ONLY followup.lms_certificates
    ADD CONSTRAINT lms_certificates_key_unique UNIQUE (idempotency_key);

ALTER TABLE ONLY followup.lms_certificates
    ADD CONSTRAINT lms_certificates_pkey PRIMARY KEY (tenant_id, learner_id, course_id);

ALTER TABLE ONLY followup.lms_content
    ADD CONSTRAINT lms_content_key_unique UNIQUE (idempotency_key);

ALTER TABLE ONLY followup.lms_content
    ADD CONSTRAINT lms_content_pkey PRIMARY KEY (tenant_id, content_id, version);

ALTER TABLE ONLY followup.lms_learners
    ADD CONSTRAINT lms_learners_pkey PRIMARY KEY (tenant_id, learner_id);

ALTER TABLE ONLY followup.lms_opt_outs
    ADD CONSTRAINT lms_opt_outs_pkey PRIMARY KEY (tenant_id, learner_id, action_type);

ALTER TABLE ONLY followup.lms_reminders
    ADD CONSTRAINT lms_reminders_key_unique UNIQUE (idempotency_key);

ALTER TABLE ONLY followup.lms_reminders
    ADD CONSTRAINT lms_reminders_pkey PRIMARY KEY (id);

ALTER TABLE ONLY followup.review_items
    ADD CONSTRAINT review_items_pkey PRIMARY KEY (id);

ALTER TABLE ONLY followup.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);

ALTER TABLE ONLY followup.stage_census
    ADD CONSTRAINT stage_census_pkey PRIMARY KEY (day, stage);

ALTER TABLE ONLY followup.stage_entries
    ADD CONSTRAINT stage_entries_pkey PRIMARY KEY (id);

ALTER TABLE ONLY followup.step_completions
    ADD CONSTRAINT step_completions_pkey PRIMARY KEY (key);

ALTER TABLE ONLY followup.task_completions
    ADD CONSTRAINT task_completions_pkey PRIMARY KEY (id);

ALTER TABLE ONLY followup.task_completions
    ADD CONSTRAINT task_completions_task_unique UNIQUE (task_id);

ALTER TABLE ONLY followup.tenants
    ADD CONSTRAINT tenants_pkey PRIMARY KEY (id);

ALTER TABLE ONLY followup.watch_steps
    ADD CONSTRAINT watch_steps_pkey PRIMARY KEY (id);

ALTER TABLE ONLY followup.watch_steps
    ADD CONSTRAINT watch_steps_unique_step UNIQUE (watch_id, step_no);

ALTER TABLE ONLY followup.watches
    ADD CONSTRAINT watches_pkey PRIMARY KEY (id);

ALTER TABLE ONLY followup.work_items
    ADD CONSTRAINT work_items_pkey PRIMARY KEY (id);

CREATE INDEX actions_crm_lead_created ON followup.actions USING btree (created_at) WHERE (kind = 'crm_lead'::text);

CREATE INDEX actions_open ON followup.actions USING btree (outcome) WHERE (outcome = ANY (ARRAY['attempted'::text, 'unknown'::text, 'failed'::text]));

CREATE INDEX alerts_action_key ON followup.alerts USING btree (action_key) WHERE (action_key IS NOT NULL);

CREATE INDEX alerts_fingerprint ON followup.alerts USING btree (fingerprint, occurred_at DESC);

CREATE INDEX audit_log_at ON followup.audit_log USING btree (at);

CREATE INDEX audit_log_subject ON followup.audit_log USING btree (subject, at);

CREATE INDEX enrich_queue_oldest ON followup.enrich_queue USING btree (changed_at);

CREATE INDEX events_dead ON followup.events USING btree (id) WHERE (status = 'dead'::text);

CREATE INDEX events_dedup ON followup.events USING btree (dedup_key, received_at DESC);

CREATE UNIQUE INDEX events_delivery_id ON followup.events USING btree (source, delivery_id) WHERE (delivery_id IS NOT NULL);

CREATE INDEX events_pending ON followup.events USING btree (next_attempt_at) WHERE (status = 'pending'::text);

CREATE INDEX lead_classifications_created ON followup.lead_classifications USING btree (created_at);

CREATE INDEX lead_classifications_lead ON followup.lead_classifications USING btree (lead_id);

CREATE INDEX lead_events_lead ON followup.lead_events USING btree (lead_id);

CREATE INDEX links_expires ON followup.links USING btree (expires_at);

CREATE UNIQUE INDEX links_subject ON followup.links USING btree (purpose, subject);

CREATE INDEX lms_reminders_assignment ON followup.lms_reminders USING btree (tenant_id, learner_id, assignment_id);

CREATE INDEX lms_reminders_open ON followup.lms_reminders USING btree (tenant_id, due_at) WHERE (delivery_outcome = ANY (ARRAY['planned'::text, 'attempted'::text, 'failed'::text, 'unknown'::text]));

CREATE INDEX review_items_open ON followup.review_items USING btree (created_at) WHERE (resolved_at IS NULL);

CREATE INDEX stage_entries_entered_at ON followup.stage_entries USING btree (entered_at);

CREATE INDEX step_completions_event ON followup.step_completions USING btree (event_id);

CREATE INDEX task_completions_watch ON followup.task_completions USING btree (watch_id, step_no);

CREATE INDEX watch_steps_due ON followup.watch_steps USING btree (due_on) WHERE ((fired_at IS NULL) AND (skipped_at IS NULL));

CREATE INDEX watch_steps_task_ref ON followup.watch_steps USING btree (task_ref) WHERE (task_ref IS NOT NULL);

CREATE UNIQUE INDEX watches_one_open ON followup.watches USING btree (subject_type, subject_id) WHERE (closed_at IS NULL);

CREATE INDEX watches_subject ON followup.watches USING btree (subject_type, subject_id, registered_at DESC);

CREATE UNIQUE INDEX work_items_one_open ON followup.work_items USING btree (subject) WHERE (state <> 'closed'::text);

CREATE INDEX work_items_subject ON followup.work_items USING btree (subject, closed_at);

CREATE INDEX work_items_waiting ON followup.work_items USING btree (pipeline, kind, owner) WHERE (state <> 'closed'::text);

CREATE TRIGGER watches_enrich_queue AFTER INSERT ON followup.watches FOR EACH ROW WHEN ((new.closed_at IS NULL)) EXECUTE FUNCTION followup.enrich_queue_new_watch();

ALTER TABLE ONLY followup.action_attempts
    ADD CONSTRAINT action_attempts_action_id_fkey FOREIGN KEY (action_id) REFERENCES followup.actions(id) ON DELETE CASCADE;

ALTER TABLE ONLY followup.actions
    ADD CONSTRAINT actions_watch_id_fkey FOREIGN KEY (watch_id) REFERENCES followup.watches(id);

ALTER TABLE ONLY followup.deal_marks
    ADD CONSTRAINT deal_marks_last_event_id_fkey FOREIGN KEY (last_event_id) REFERENCES followup.events(id);

ALTER TABLE ONLY followup.lead_classifications
    ADD CONSTRAINT lead_classifications_event_id_fkey FOREIGN KEY (event_id) REFERENCES followup.events(id);

ALTER TABLE ONLY followup.lead_classifications
    ADD CONSTRAINT lead_classifications_lead_id_fkey FOREIGN KEY (lead_id) REFERENCES followup.leads(id);

ALTER TABLE ONLY followup.lead_events
    ADD CONSTRAINT lead_events_event_id_fkey FOREIGN KEY (event_id) REFERENCES followup.events(id);

ALTER TABLE ONLY followup.lead_events
    ADD CONSTRAINT lead_events_lead_id_fkey FOREIGN KEY (lead_id) REFERENCES followup.leads(id);

ALTER TABLE ONLY followup.links
    ADD CONSTRAINT links_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES followup.tenants(id) ON DELETE CASCADE;

ALTER TABLE ONLY followup.lms_assignments
    ADD CONSTRAINT lms_assignments_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES followup.tenants(id);

ALTER TABLE ONLY followup.lms_certificates
    ADD CONSTRAINT lms_certificates_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES followup.tenants(id);

ALTER TABLE ONLY followup.lms_content
    ADD CONSTRAINT lms_content_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES followup.tenants(id);

ALTER TABLE ONLY followup.lms_learners
    ADD CONSTRAINT lms_learners_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES followup.tenants(id) ON DELETE CASCADE;

ALTER TABLE ONLY followup.lms_opt_outs
    ADD CONSTRAINT lms_opt_outs_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES followup.tenants(id);

ALTER TABLE ONLY followup.lms_reminders
    ADD CONSTRAINT lms_reminders_tenant_id_learner_id_assignment_id_fkey FOREIGN KEY (tenant_id, learner_id, assignment_id) REFERENCES followup.lms_assignments(tenant_id, learner_id, quiz_id);

ALTER TABLE ONLY followup.stage_entries
    ADD CONSTRAINT stage_entries_watch_id_fkey FOREIGN KEY (watch_id) REFERENCES followup.watches(id) ON DELETE CASCADE;

ALTER TABLE ONLY followup.step_completions
    ADD CONSTRAINT step_completions_event_id_fkey FOREIGN KEY (event_id) REFERENCES followup.events(id);

ALTER TABLE ONLY followup.task_completions
    ADD CONSTRAINT task_completions_step FOREIGN KEY (watch_id, step_no) REFERENCES followup.watch_steps(watch_id, step_no) ON DELETE CASCADE;

ALTER TABLE ONLY followup.watch_steps
    ADD CONSTRAINT watch_steps_watch_id_fkey FOREIGN KEY (watch_id) REFERENCES followup.watches(id) ON DELETE CASCADE;

ALTER TABLE ONLY followup.watches
    ADD CONSTRAINT watches_cadence_name_fkey FOREIGN KEY (cadence_name) REFERENCES followup.cadences(name);

ALTER TABLE ONLY followup.watches
    ADD CONSTRAINT watches_source_event_id_fkey FOREIGN KEY (source_event_id) REFERENCES followup.events(id);
