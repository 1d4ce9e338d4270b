-- 0023: an error of the database itself stops the event worker's run without charging the event
-- it met (engine/run_stops.py); the runs an event stopped in a row are counted, so that one that
-- stops FOLLOWUP_EVENT_RUN_STOPS_MAX runs in a row becomes a dead letter instead of stopping every
-- run for good. Any other ending of its handling (done, retried, replayed) starts the count again.
ALTER TABLE events ADD COLUMN run_stops integer NOT NULL DEFAULT 0;
ALTER TABLE events ADD CONSTRAINT events_run_stops_check CHECK (run_stops >= 0);
